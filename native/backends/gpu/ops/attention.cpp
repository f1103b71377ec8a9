// Gated attention: q/k norm with partial RoPE, and causal GQA attention: flash attention on the matrix units
// for tiled prefill calls (attention_prefill.metal), otherwise split-K over spans of keys sized by the
// context (attention_split.h), then a combine unless one span covers them all; the spans on the matrix
// units at the fp16 precision (attention_half.metal), in fp32 arithmetic otherwise (attention.metal).
#include <algorithm>
#include <cmath>

#include "../call.h"
#include "attention_split.h"

namespace moelens::gpu {

namespace {
// Partial results of one attention launch stay below this many floats (longer prefills are split).
constexpr size_t kMaxAttentionPartialFloats = size_t(8) << 20;

static_assert(ATTN_PREFILL_THREADS == 32 * ATTN_PREFILL_SIMDGROUPS &&
                  ATTN_PREFILL_ROWS == ATTN_PREFILL_SIMDGROUP_ROWS * ATTN_PREFILL_SIMDGROUPS && ATTN_PREFILL_SIMDGROUP_ROWS == 16,
              "attention_prefill: a simdgroup of 32 threads per 16 query rows");
namespace ap32 = k::attention_prefill_32;
namespace ap64 = k::attention_prefill_64;
namespace ap128 = k::attention_prefill_128;
namespace ap256 = k::attention_prefill_256;
namespace ap256h = k::attention_prefill_256_halves;
static_assert(ap32::q == ap256::q && ap32::k_cache == ap256::k_cache && ap32::v_cache == ap256::v_cache &&
                  ap32::gate == ap256::gate && ap32::out == ap256::out && ap32::p == ap256::p && ap64::q == ap256::q && ap64::k_cache == ap256::k_cache && ap64::v_cache == ap256::v_cache &&
                  ap64::gate == ap256::gate && ap64::out == ap256::out && ap64::p == ap256::p && ap128::q == ap256::q &&
                  ap128::k_cache == ap256::k_cache && ap128::v_cache == ap256::v_cache && ap128::gate == ap256::gate &&
                  ap128::out == ap256::out && ap128::p == ap256::p && ap256h::q == ap256::q &&
                  ap256h::k_cache == ap256::k_cache && ap256h::v_cache == ap256::v_cache && ap256h::gate == ap256::gate &&
                  ap256h::out == ap256::out && ap256h::p == ap256::p,
              "attention_prefill_<head_dim> kernels share their bindings");

static_assert(ATTN_SPLIT_BLOCK == ATTN_SPLIT_KEYS_PER_SIMDGROUP * (REDUCE_THREADS / 32),
              "attention_partial: each simdgroup scores ATTN_SPLIT_KEYS_PER_SIMDGROUP keys of a block");
static_assert(ATTN_MAX_GROUP * ATTN_SPLIT_BLOCK <= REDUCE_THREADS, "attention_partial: one thread per (head, key) of a block");
static_assert(ATTN_SPLIT_KEYS_PER_THREAD * (REDUCE_THREADS / (ATTN_SPLIT_MAX_HEAD_DIM / 4)) >= ATTN_SPLIT_BLOCK,
              "attention_partial: the PV threads cover a block's V rows");
namespace apn = k::attention_partial;
namespace apw = k::attention_partial_wide;
static_assert(apn::q == apw::q && apn::k_cache == apw::k_cache && apn::v_cache == apw::v_cache && apn::part_ml == apw::part_ml &&
                  apn::part_o == apw::part_o && apn::out == apw::out && apn::lse == apw::lse && apn::gate == apw::gate &&
                  apn::p == apw::p,
              "attention_partial and attention_partial_wide share their bindings");
namespace ah32 = k::attention_partial_half_32;
namespace ah64 = k::attention_partial_half_64;
namespace ah128 = k::attention_partial_half_128;
namespace ah256 = k::attention_partial_half_256;
static_assert(ah32::q == ah256::q && ah32::k_cache == ah256::k_cache && ah32::v_cache == ah256::v_cache &&
                  ah32::part_ml == ah256::part_ml && ah32::part_o == ah256::part_o && ah32::out == ah256::out &&
                  ah32::gate == ah256::gate && ah32::p == ah256::p && ah64::q == ah256::q && ah64::k_cache == ah256::k_cache &&
                  ah64::v_cache == ah256::v_cache && ah64::part_ml == ah256::part_ml && ah64::part_o == ah256::part_o &&
                  ah64::out == ah256::out && ah64::gate == ah256::gate && ah64::p == ah256::p && ah128::q == ah256::q &&
                  ah128::k_cache == ah256::k_cache && ah128::v_cache == ah256::v_cache && ah128::part_ml == ah256::part_ml &&
                  ah128::part_o == ah256::part_o && ah128::out == ah256::out && ah128::gate == ah256::gate && ah128::p == ah256::p,
              "attention_partial_half_<head_dim> kernels share their bindings");
static_assert(ATTN_HALF_KEYS == ATTN_SPLIT_BLOCK, "attention_partial_half: spans are whole blocks of its keys");
static_assert(ATTN_HALF_THREADS == 32 * ATTN_HALF_SIMDGROUPS && ATTN_HALF_THREADS == ATTN_HALF_KEYS * ATTN_HALF_GROUP &&
                  ATTN_HALF_MAX_SLICE * ATTN_HALF_SIMDGROUPS == ATTN_HALF_MAX_HEAD_DIM,
              "attention_partial_half: a thread per (head, key) of a block, a slice of the head per simdgroup");
static_assert(ATTN_MAX_SPLITS % REDUCE_THREADS == 0, "attention_combine: each thread reads the same number of splits");

// The build of a kernel for a head dimension, among its builds for head dims 32, 64, 128 and 256; false
// when none is built for it.
bool head_dim_build(int head_dim, const k::Id (&builds)[4], k::Id* id) {
  for (int i = 0; i < 4; ++i)
    if (head_dim == 32 << i) {
      *id = builds[i];
      return true;
    }
  return false;
}
constexpr k::Id kPrefillBuilds[4] = {ap32::id, ap64::id, ap128::id, ap256::id};  // flash attention
constexpr k::Id kHalfBuilds[4] = {ah32::id, ah64::id, ah128::id, ah256::id};  // split-K on the matrix units
}  // namespace

ElemType GpuBackend::kv_cache_type(const AttentionShape& s) const {
  k::Id id;
  const bool half = precision_ == Precision::F16 && s.kv_heads > 0 && s.heads % s.kv_heads == 0 &&
                    s.heads / s.kv_heads <= int(ATTN_HALF_GROUP) && head_dim_build(s.head_dim, kHalfBuilds, &id) &&
                    head_dim_build(s.head_dim, kPrefillBuilds, &id);
  return half ? ElemType::F16 : ElemType::F32;
}

void GpuBackend::attention_prep(View qg, View k, View v, View q_norm, View k_norm, int n, int pos0,
                                const AttentionShape& s, View q, View gate, View k_rows, View v_rows) {
  auto lock = enter();
  if (s.rotary_dim % 2 != 0 || s.rotary_dim > s.head_dim) fail("gpu backend: rotary_dim ", s.rotary_dim, " for head_dim ", s.head_dim);
  if (s.head_dim <= 0 || s.head_dim > int(ATTN_SPLIT_MAX_HEAD_DIM))
    fail("gpu backend: attention head_dim ", s.head_dim, " (the kernels take up to ", ATTN_SPLIT_MAX_HEAD_DIM, ")");
  const bool store = bool(k_rows), half = store && k_rows.buf->type() == ElemType::F16;
  if (store && (!v || !v_rows || v_rows.buf->type() != k_rows.buf->type() || k_rows.buf->type() == ElemType::I32))
    fail("gpu backend: attention_prep stores k and v into KV cache rows of one type, F32 or F16");
  shader::AttentionPrepParams p{u32(size_t(n), "tokens"), u32(size_t(pos0), "position"), uint32_t(s.heads),
                                uint32_t(s.kv_heads), uint32_t(s.head_dim), uint32_t(s.rotary_dim), s.gated ? 1u : 0u,
                                s.rope_theta, s.eps, !store ? KV_STORE_NONE : half ? KV_STORE_F16 : KV_STORE_F32};
  namespace a = k::attention_prep;
  Call(*this, a::id).buf(a::qg, qg).buf(a::k, k).buf(a::q_norm, q_norm).buf(a::k_norm, k_norm).buf(a::q, q)
      .opt(a::gate, s.gated ? gate : View()).opt(a::v, store ? v : View()).opt(a::k_rows, store && !half ? k_rows : View())
      .opt(a::v_rows, store && !half ? v_rows : View()).opt(a::k_rows_half, half ? k_rows : View())
      .opt(a::v_rows_half, half ? v_rows : View()).params(a::p, p).grid(p.heads + p.kv_heads, p.n).threads(32).run();
}

void GpuBackend::attention(View q, View k_cache, View v_cache, int n, int pos0, const AttentionShape& s, View out,
                           View probs, View gate) {
  auto lock = enter();
  const size_t H = size_t(s.heads), D = size_t(s.head_dim);
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0) fail("gpu backend: attention heads not a multiple of KV heads");
  const size_t G = H / size_t(s.kv_heads);
  const bool half_cache = k_cache.buf->type() == ElemType::F16;
  if (v_cache.buf->type() != k_cache.buf->type() || k_cache.buf->type() == ElemType::I32)
    fail("gpu backend: attention KV caches of one type, F32 or F16");
  if (k_cache.offset % (half_cache ? 8 : 4) != 0 || v_cache.offset % (half_cache ? 8 : 4) != 0)
    fail("gpu backend: attention KV cache views must start on a 16-byte boundary (16-byte loads)");
  k::Id prefill_id;
  // Tiled prefill: one flash-attention launch over a half cache. The softmax weights (probs) come from
  // the split-K kernels, which keep each row's log-sum-exp; so do head dims without a tiled kernel.
  if (tiled(n) && half_cache && !probs && head_dim_build(s.head_dim, kPrefillBuilds, &prefill_id)) {
    shader::AttentionPrefillParams p{};
    p.n = u32(size_t(n), "tokens");
    p.pos0 = u32(size_t(pos0), "position");
    p.heads = uint32_t(s.heads);
    p.kv_heads = uint32_t(s.kv_heads);
    p.group = uint32_t(G);
    p.tiles = ceil_div(size_t(n) * G, ATTN_PREFILL_ROWS);
    p.scale = float(1.0 / std::sqrt(double(s.head_dim)) * 1.4426950408889634);  // log2(e): exp2 in the kernel
    p.gated = gate ? 1u : 0u;
    // A short prompt's launch, whose time is its longest threadgroup's walk over the keys, on twice the
    // threadgroups, each half the value dimensions.
    const bool halves = prefill_id == ap256::id && size_t(p.tiles) * p.kv_heads < attention_halves_below_;
    if (halves) prefill_id = ap256h::id;
    Call(*this, prefill_id).buf(ap256::q, q).buf(ap256::k_cache, k_cache).buf(ap256::v_cache, v_cache)
        .opt(ap256::gate, gate).buf(ap256::out, out).params(ap256::p, p)
        .grid(p.tiles, p.kv_heads, halves ? 2u : 1u).threads(ATTN_PREFILL_THREADS).run();
    return;
  }
  if (G > ATTN_MAX_GROUP || G * D > ATTN_MAX_QUERY_FLOATS)
    fail("gpu backend: ", G, " query heads of dim ", D, " per KV head exceed the attention kernel's threadgroup memory");
  if (D % 4 != 0 || D > ATTN_SPLIT_MAX_HEAD_DIM)
    fail("gpu backend: attention head_dim ", D, " (the split-K kernels take multiples of 4 up to ", ATTN_SPLIT_MAX_HEAD_DIM, ")");
  const size_t total = size_t(pos0) + size_t(n);
  shader::AttentionParams p{};
  p.n_call = u32(size_t(n), "tokens");
  p.pos0 = u32(size_t(pos0), "position");
  p.heads = uint32_t(s.heads);
  p.kv_heads = uint32_t(s.kv_heads);
  p.head_dim = uint32_t(s.head_dim);
  p.scale = 1.0f / std::sqrt(float(s.head_dim));
  p.gated = gate ? 1u : 0u;
  // Tokens per launch: all of them unless the partials (splits > 1) would outgrow their budget.
  size_t block = size_t(n);
  AttentionSplit split = attention_split(block, total, size_t(s.kv_heads));
  if (split.splits > 1) {
    block = std::clamp<size_t>(kMaxAttentionPartialFloats / (H * split.splits * (D + 2)), 1, size_t(n));
    split = attention_split(block, total, size_t(s.kv_heads));
  }
  p.splits = split.splits;
  p.span = split.span;
  // A half cache's spans on the matrix units: groups up to the products' 8 columns, head dims with a
  // build. The softmax weights (probs) need the fp32 kernels' log-sum-exp; they read an fp32 copy of
  // the rows of a half cache.
  k::Id half_id = kHalfBuilds[0];  // head_dim_build sets it where `half` holds
  const bool half = half_cache && !probs && G <= ATTN_HALF_GROUP && head_dim_build(s.head_dim, kHalfBuilds, &half_id);
  if (half_cache && !half) {
    const size_t rows = total * size_t(s.kv_heads) * D;
    scratch(attn_k32_, rows);
    scratch(attn_v32_, rows);
    copy(View(attn_k32_.get()), k_cache, rows);
    copy(View(attn_v32_.get()), v_cache, rows);
    k_cache = View(attn_k32_.get());
    v_cache = View(attn_v32_.get());
  }
  if (split.splits > 1) {
    scratch(attn_ml_, block * H * split.splits * 2);
    scratch(attn_o_, block * H * split.splits * D);
  }
  scratch(attn_lse_, block * H);
  // fp16 decode: the combine also writes the output as int16 blocks, which the output projection's GEMV
  // reads in place of quantize_int16's (int16_form_).
  View xq, de;
  const bool int16 = split.splits > 1 && writes_int16_form(size_t(n) * H * D, s.head_dim, xq, de);
  p.int16 = int16 ? 1u : 0u;
  for (size_t t0 = 0; t0 < size_t(n); t0 += block) {
    p.t0 = uint32_t(t0);
    p.n = uint32_t(std::min(block, size_t(n) - t0));
    namespace ap = k::attention_partial;
    const bool one = split.splits == 1;  // the partial kernel writes the output itself
    if (half)
      Call(*this, half_id).buf(ah256::q, q).buf(ah256::k_cache, k_cache).buf(ah256::v_cache, v_cache)
          .opt(ah256::part_ml, one ? View() : View(attn_ml_.get())).opt(ah256::part_o, one ? View() : View(attn_o_.get()))
          .opt(ah256::out, one ? out : View()).opt(ah256::gate, one ? gate : View()).params(ah256::p, p)
          .grid(p.splits, p.kv_heads, p.n).threads(ATTN_HALF_THREADS).run();
    else
      Call(*this, G <= ATTN_PARTIAL_GROUP ? ap::id : apw::id).buf(ap::q, q).buf(ap::k_cache, k_cache).buf(ap::v_cache, v_cache)
          .opt(ap::part_ml, one ? View() : View(attn_ml_.get())).opt(ap::part_o, one ? View() : View(attn_o_.get()))
          .opt(ap::out, one ? out : View()).opt(ap::lse, one ? View(attn_lse_.get()) : View())
          .opt(ap::gate, one ? gate : View()).params(ap::p, p).grid(p.splits, p.kv_heads, p.n).threads(REDUCE_THREADS).run();
    if (!one) {
      namespace ac = k::attention_combine;
      Call(*this, ac::id).buf(ac::part_ml, attn_ml_.get()).buf(ac::part_o, attn_o_.get()).buf(ac::out, out)
          .buf(ac::lse, attn_lse_.get()).opt(ac::gate, gate).opt(ac::xq, xq).opt(ac::de, de).params(ac::p, p)
          .grid(p.heads, p.n).threads(REDUCE_THREADS).run();
    }
    if (probs) {
      namespace pr = k::attention_probs;
      Call(*this, pr::id).buf(pr::q, q).buf(pr::k_cache, k_cache).buf(pr::lse, attn_lse_.get()).buf(pr::probs, probs)
          .params(pr::p, p).grid(ceil_div(total, ATTN_CHUNK), p.heads, p.n).threads(REDUCE_THREADS).run();
    }
  }
  if (int16) int16_form_ = {out, size_t(n) * H * D, true};
}

}  // namespace moelens::gpu
