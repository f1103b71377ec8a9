// Mixture of experts: routing (softmax, top-k, bias edits) and the routed plus shared experts, per token
// (decode) or, for chunks that tiled(n) takes, as grouped GEMMs over the experts' buckets.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

void GpuBackend::route(View logits, View bias, int n, int experts, int top_k, bool renormalize, View ids, View weights,
                       View probs) {
  auto lock = enter();
  if (experts > int(ROUTER_MAX_EXPERTS) || top_k > int(ROUTER_MAX_K) || top_k > experts || top_k < 1)
    fail("gpu backend: routing ", experts, " experts top-", top_k, " (at most ", ROUTER_MAX_EXPERTS, " experts, top-",
         ROUTER_MAX_K, ")");
  shader::RouteParams p{u32(size_t(n), "tokens"), uint32_t(experts), uint32_t(top_k), renormalize ? 1u : 0u,
                        bias ? 1u : 0u, probs ? 1u : 0u};
  namespace r = k::route;
  Call(*this, r::id).buf(r::logits, logits).opt(r::bias, bias).buf(r::ids, ids).buf(r::weights, weights)
      .opt(r::probs, probs).params(r::p, p).grid(p.n).threads(32).run();
}

static_assert(k::moe_gate_up::p == k::moe_gate_up_int16::p && k::moe_gate_up::xq == k::moe_gate_up_int16::xq &&
                  k::moe_gate_up::de == k::moe_gate_up_int16::de && k::moe_gate_up::sh == k::moe_gate_up_int16::sh &&
                  k::moe_gate_up::dw == k::moe_gate_up_int16::dw && k::moe_gate_up::db == k::moe_gate_up_int16::db,
              "moe_gate_up, moe_gate_up_int16: the same buffer indices");

void GpuBackend::moe_experts(const Weight& gate_w, const Weight& up_w, const Weight& down_w, View x, View ids,
                             View weights, int n, int top_k, View out, const SharedExpert& shared) {
  auto lock = enter();
  const auto& G = static_cast<const GpuWeight&>(gate_w);
  const auto& U = static_cast<const GpuWeight&>(up_w);
  const auto& D = static_cast<const GpuWeight&>(down_w);
  if (!G.experts || !U.experts || !D.experts) fail("gpu backend: moe_experts needs expert stacks");
  if (top_k > int(ROUTER_MAX_K)) fail("gpu backend: ", top_k, " experts per token (the expert kernels take ", ROUTER_MAX_K, ")");
  if (tiled(n)) return moe_experts_tiled(G, U, D, x, ids, weights, n, top_k, out, shared);
  shader::MoeParams p{};
  p.gate = G.desc, p.up = U.desc, p.down = D.desc;
  p.n = u32(size_t(n), "tokens"), p.k = uint32_t(top_k), p.hidden = G.desc.cols, p.inter = G.desc.rows;
  p.x_vec4 = x.offset % 4 == 0 && G.desc.cols % 4 == 0 ? 1u : 0u;
  p.h_vec4 = G.desc.rows % 4 == 0 ? 1u : 0u;
  const GpuWeight *SG = nullptr, *SU = nullptr, *SD = nullptr;
  if (shared.gate) {
    SG = &static_cast<const GpuWeight&>(*shared.gate);
    SU = &static_cast<const GpuWeight&>(*shared.up);
    SD = &static_cast<const GpuWeight&>(*shared.down);
    p.sgate = SG->desc, p.sup = SU->desc, p.sdown = SD->desc;
    p.shared = 1u, p.shared_inter = SG->desc.rows, p.shared_scale = shared.scale;
    p.sh_vec4 = SG->desc.rows % 4 == 0 ? 1u : 0u;
  }
  // fp16: the gate and up products in integer arithmetic on x's int16 blocks (int16_form_'s, or
  // quantize_int16's) when every one of their matrices takes them.
  View xq, de;
  p.x_int16 = precision_ == Precision::F16 && int16_takes(G) && int16_takes(U) && (!SG || (int16_takes(*SG) && int16_takes(*SU)));
  if (p.x_int16) xq = int16_rows(x, n, p.hidden, de);
  scratch(moe_h_, size_t(n) * size_t(top_k) * p.inter);
  scratch(moe_shared_h_, std::max<size_t>(1, size_t(n) * p.shared_inter));
  auto data = [](const GpuWeight* w) { return w ? w->data.get() : nullptr; };
  auto scales = [](const GpuWeight* w) { return w ? w->scales.get() : nullptr; };
  auto biases = [](const GpuWeight* w) { return w ? w->biases.get() : nullptr; };
  namespace gu = k::moe_gate_up;
  Call(*this, p.x_int16 ? k::moe_gate_up_int16::id : gu::id).buf(gu::gw, G.data.get()).buf(gu::gs, G.scales.get()).buf(gu::gb, G.biases.get())
      .buf(gu::uw, U.data.get()).buf(gu::us, U.scales.get()).buf(gu::ub, U.biases.get()).buf(gu::x, x)
      .buf(gu::ids, ids).buf(gu::h, moe_h_.get()).buf(gu::sgw, data(SG)).buf(gu::sgs, scales(SG))
      .buf(gu::sgb, biases(SG)).buf(gu::suw, data(SU)).buf(gu::sus, scales(SU)).buf(gu::sub, biases(SU))
      .buf(gu::sh, moe_shared_h_.get()).opt(gu::xq, xq).opt(gu::de, de).params(gu::p, p)
      .buf(gu::dw, D.data.get()).buf(gu::ds, D.scales.get()).buf(gu::db, D.biases.get())  // prefetched for moe_down
      .grid(ceil_div(std::max(p.inter, p.shared_inter), GEMV_ROWS * GEMV_SIMDGROUPS / 2), p.k + p.shared, p.n)
      .threads(GEMV_THREADS).run();
  // moe_down reads the k experts' rows as one virtual row.
  p.split = split_k(ceil_div(p.hidden, GEMV_ROWS), p.n, size_t(D.desc.row_bytes / 4) * size_t(top_k), MOE_DOWN_UNROLL);
  namespace dn = k::moe_down;
  Call(*this, dn::id).buf(dn::dw, D.data.get()).buf(dn::ds, D.scales.get()).buf(dn::db, D.biases.get())
      .buf(dn::h, moe_h_.get()).buf(dn::ids, ids).buf(dn::weights, weights).buf(dn::out, out)
      .buf(dn::sdw, data(SD)).buf(dn::sds, scales(SD)).buf(dn::sdb, biases(SD)).buf(dn::sh, moe_shared_h_.get())
      .opt(dn::gate_logit, shared.gate ? shared.gate_logit : View()).params(dn::p, p)
      .grid(ceil_div(p.hidden, GEMV_ROWS * GEMV_SIMDGROUPS / p.split), p.n).threads(GEMV_THREADS).run();
}

static_assert(4 * 2 * 8 * (32 + GEMM_OUT_PAD) * sizeof(float) <=
                  (GEMM_TILE_TOKENS + 2 * GEMM_TILE_ROWS) * (GEMM_K + GEMM_PAD) * 2,
              "moe_gate_up_tiled: the epilogue's slabs fit in the tiles' memory");
static_assert(k::moe_gate_up_tiled::x == k::moe_gate_up_tiled_affine::x && k::moe_gate_up_tiled::p == k::moe_gate_up_tiled_affine::p &&
                  k::moe_gate_up_tiled::x == k::moe_gate_up_tiled_affine_short::x &&
                  k::moe_gate_up_tiled::p == k::moe_gate_up_tiled_affine_short::p &&
                  k::moe_down_tiled::ys == k::moe_down_tiled_affine::ys && k::moe_down_tiled::p == k::moe_down_tiled_affine::p &&
                  k::moe_down_tiled::ys == k::moe_down_tiled_affine_short::ys &&
                  k::moe_down_tiled::p == k::moe_down_tiled_affine_short::p &&
                  k::moe_gate_up_tiled::x == k::moe_gate_up_tiled_q4_short::x &&
                  k::moe_gate_up_tiled::p == k::moe_gate_up_tiled_q4_short::p &&
                  k::moe_down_tiled::ys == k::moe_down_tiled_q4_short::ys &&
                  k::moe_down_tiled::p == k::moe_down_tiled_q4_short::p &&
                  k::moe_gate_up_tiled::x == k::moe_gate_up_tiled_q4::x && k::moe_gate_up_tiled::p == k::moe_gate_up_tiled_q4::p &&
                  k::moe_down_tiled::ys == k::moe_down_tiled_q4::ys && k::moe_down_tiled::p == k::moe_down_tiled_q4::p,
              "the tiled MoE kernels' builds: the same buffer indices");
static_assert(Q4_TILE_ROWS == 4 * 32 && Q4_GATE_UP_TILE_ROWS == 4 * 16 && 2 * Q4_GATE_UP_TILE_ROWS == Q4_TILE_ROWS &&
                  MOE_SHORT_TILE_TOKENS == 32 && GEMM_TILE_TOKENS == 64 &&
                  4 * 8 * (32 + GEMM_OUT_PAD) <= Q4_SCALE_GROUPS * Q4_TILE_ROWS * 2,
              "the _q4 builds: 4 simdgroups of 32 rows (16 gate and 16 up rows) by 32 or 64 tokens, the gate's and "
              "the up's scales in one staging of Q4_TILE_ROWS rows, their slabs (floats) in the staged scales");
static_assert(MOE_SHORT_TILE_TOKENS % 32 == 0 && MOE_SHORT_TILE_TOKENS <= GEMM_TILE_TOKENS &&
                  MOE_SHORT_TILE_TOKENS * GEMM_K / 8 % GEMM_THREADS == 0,
              "short MoE tiles: 2x2 simdgroups of whole 16x16 products, whole activation runs per thread");
static_assert(MOE_TILE_LIST_THREADS == 512 && MOE_TILE_LIST_THREADS * MOE_TILE_LIST_PER_THREAD >= ROUTER_MAX_EXPERTS + 1,
              "moe_tile_list: 16 simdgroups, their totals scanned by one; every bucket and the shared expert's");
static_assert((MOE_BUCKET_PARTS & (MOE_BUCKET_PARTS - 1)) == 0 && MOE_BUCKET_BLOCK % (4 * MOE_BUCKET_PARTS) == 0 &&
                  MOE_BUCKET_THREADS >= ROUTER_MAX_EXPERTS,
              "moe_bucket_count: parts of whole uint4s of entries, every expert a thread");
static_assert(MOE_SCAN_THREADS == 32 * 32, "moe_bucket_scan: 32 simdgroups, their totals scanned by one simdgroup");
static_assert(MOE_BUCKET_SMALL_THREADS == 32 * 32 && MOE_BUCKET_SMALL_THREADS == 4 * MOE_BUCKET_SMALL_EXPERTS &&
                  MOE_BUCKET_SMALL_ENTRIES % MOE_BUCKET_SMALL_THREADS == 0 && MOE_BUCKET_SMALL_ENTRIES <= 0xffff &&
                  MOE_TILE_LIST_PER_THREAD * MOE_BUCKET_SMALL_THREADS >= MOE_BUCKET_SMALL_EXPERTS + 1 &&
                  MOE_BUCKET_SMALL_EXPERTS * 32 * sizeof(uint16_t) +
                          (MOE_BUCKET_SMALL_EXPERTS + 1 + 32) * sizeof(uint32_t) <= 32 * 1024,
              "moe_bucket_small: 32 simdgroups of whole rounds of 32 entries, 4 threads per expert (8 simdgroups' "
              "ushort counts each), positions in 16 bits, every bucket in the tile list, Metal's 32 KiB of "
              "threadgroup memory");

void GpuBackend::bucket_by_expert(View ids, int n, int top_k, int experts, bool shared, uint32_t tile_tokens,
                                  View offsets, View entries, View positions, View tiles) {
  auto lock = enter();
  if (n < 1 || top_k < 1) fail("gpu backend: bucketing ", n, " tokens of ", top_k, " experts each");
  if (experts < 1 || experts > int(ROUTER_MAX_EXPERTS))
    fail("gpu backend: bucketing by ", experts, " experts (the counting sort takes 1 to ", ROUTER_MAX_EXPERTS, ")");
  shader::MoeTiledParams p{};
  p.n = u32(size_t(n), "tokens"), p.k = uint32_t(top_k), p.experts = uint32_t(experts);
  p.shared = shared ? 1u : 0u, p.tile_tokens = tile_tokens;
  if (ceil_div(p.n, p.tile_tokens) >= MOE_HALF_TILE)  // a bucket's tiles are numbered below the flag
    fail("gpu backend: a chunk of ", n, " tokens has more tiles per expert than the MoE kernels number");
  const uint32_t entry_count = u32(size_t(n) * size_t(top_k), "entries"), blocks = ceil_div(entry_count, MOE_BUCKET_BLOCK);
  // Short chunks in one launch: one launch's fixed latency instead of four.
  if (entry_count <= moe_bucket_small_entries_ && p.experts <= MOE_BUCKET_SMALL_EXPERTS) {
    namespace bsm = k::moe_bucket_small;
    Call(*this, bsm::id).buf(bsm::ids, ids).buf(bsm::offsets, offsets).buf(bsm::entries, entries)
        .buf(bsm::positions, positions).buf(bsm::tiles, tiles).params(bsm::p, p).grid(1)
        .threads(MOE_BUCKET_SMALL_THREADS).run();
    return;
  }
  scratch(moe_bucket_counts_, size_t(experts) * blocks);
  // A thread per expert per part of a block: parts a power of 2, so each part is whole uint4s of entries.
  const uint32_t lanes = (p.experts + 31) / 32 * 32;
  uint32_t parts = MOE_BUCKET_PARTS;
  while (parts > 1 && lanes * parts > uint32_t(MOE_BUCKET_THREADS)) parts /= 2;
  namespace bc = k::moe_bucket_count;
  Call(*this, bc::id).buf(bc::ids, ids).buf(bc::counts, moe_bucket_counts_.get()).buf(bc::positions, positions)
      .params(bc::p, p).grid(blocks).threads(lanes * parts).run();
  namespace bs = k::moe_bucket_scan;
  Call(*this, bs::id).buf(bs::counts, moe_bucket_counts_.get()).buf(bs::offsets, offsets).params(bs::p, p).grid(1)
      .threads(MOE_SCAN_THREADS).run();
  namespace sc = k::moe_bucket_scatter;
  Call(*this, sc::id).buf(sc::ids, ids).buf(sc::counts, moe_bucket_counts_.get()).buf(sc::entries, entries)
      .buf(sc::positions, positions).params(sc::p, p).grid(ceil_div(entry_count, ELEMENTWISE_THREADS))
      .threads(ELEMENTWISE_THREADS).run();
  namespace tl = k::moe_tile_list;
  Call(*this, tl::id).buf(tl::offsets, offsets).buf(tl::tiles, tiles).params(tl::p, p).grid(1)
      .threads(MOE_TILE_LIST_THREADS).run();
}

void GpuBackend::moe_experts_tiled(const GpuWeight& G, const GpuWeight& U, const GpuWeight& D, View x, View ids,
                                   View weights, int n, int top_k, View out, const SharedExpert& shared) {
  if (G.experts > int64_t(ROUTER_MAX_EXPERTS))
    fail("gpu backend: ", G.experts, " experts (the expert kernels take ", ROUTER_MAX_EXPERTS, ")");
  shader::MoeTiledParams p{};
  p.gate = G.desc, p.up = U.desc, p.down = D.desc;
  p.n = u32(size_t(n), "tokens"), p.k = uint32_t(top_k), p.experts = uint32_t(G.experts), p.hidden = G.desc.cols;
  const GpuWeight *SG = &G, *SU = &U, *SD = &D;  // bound, never read, without a shared expert
  if (shared.gate) {
    SG = &static_cast<const GpuWeight&>(*shared.gate);
    SU = &static_cast<const GpuWeight&>(*shared.up);
    SD = &static_cast<const GpuWeight&>(*shared.down);
    p.sgate = SG->desc, p.sup = SU->desc, p.sdown = SD->desc;
    p.shared = 1u, p.shared_scale = shared.scale;
  }
  const size_t entries = size_t(n) * size_t(top_k);
  scratch(moe_offsets_, size_t(p.experts) + 1);
  scratch(moe_entries_, entries);
  scratch(moe_positions_, entries);
  // h and sh as half rows (moe_gate_up_tiled writes them so; HALF_ROW_LD is even).
  scratch(moe_h_, entries * HALF_ROW_LD(G.desc.rows) / 2);
  scratch(moe_shared_h_, std::max<size_t>(1, size_t(n) * HALF_ROW_LD(p.sgate.rows) / 2));
  scratch(moe_y_, entries * p.hidden);
  scratch(moe_shared_y_, size_t(n) * p.hidden);

  // The kernels' affine builds when every matrix is MLX 4- or 8-bit (fewer registers: more threadgroups
  // per SM); the same bindings either way.
  auto affine = [](const auto& d) { return d.format == WEIGHT_Q4 || d.format == WEIGHT_Q8; };
  const bool only_affine = affine(G.desc) && affine(U.desc) && affine(D.desc) &&
                           (!shared.gate || (affine(p.sgate) && affine(p.sup) && affine(p.sdown)));
  const bool short_tiles = only_affine && size_t(n) * size_t(top_k) <= size_t(MOE_SHORT_TILE_TOKENS) * p.experts;
  // MLX 4-bit weights in groups of 64 are read straight into the matrix units' fragments (the `_q4`
  // builds).
  const bool q4_tiles = q4_tiles_take(G) && q4_tiles_take(U) && q4_tiles_take(D) &&
                        (!shared.gate || (q4_tiles_take(*SG) && q4_tiles_take(*SU) && q4_tiles_take(*SD)));
  const View xh = half_rows(x, n, p.hidden, q4_tiles);  // the `_q4` builds' tiles are in fragment order
  const k::Id gate_up_id = q4_tiles      ? (short_tiles ? k::moe_gate_up_tiled_q4_short::id : k::moe_gate_up_tiled_q4::id)
                           : short_tiles ? k::moe_gate_up_tiled_affine_short::id
                           : only_affine ? k::moe_gate_up_tiled_affine::id
                                         : k::moe_gate_up_tiled::id;
  const k::Id down_id = q4_tiles      ? (short_tiles ? k::moe_down_tiled_q4_short::id : k::moe_down_tiled_q4::id)
                        : short_tiles ? k::moe_down_tiled_affine_short::id
                        : only_affine ? k::moe_down_tiled_affine::id
                                      : k::moe_down_tiled::id;
  const uint32_t gate_up_rows = q4_tiles ? Q4_GATE_UP_TILE_ROWS : GEMM_TILE_ROWS;
  const uint32_t down_rows = q4_tiles ? Q4_TILE_ROWS : GEMM_TILE_ROWS;
  // The buckets' tiles listed on the device; the launches cover the most a routing can give.
  p.tile_tokens = short_tiles ? MOE_SHORT_TILE_TOKENS : GEMM_TILE_TOKENS;
  const uint32_t max_tiles =
      ceil_div(size_t(p.n) * p.k, p.tile_tokens) + p.experts + (p.shared ? ceil_div(p.n, p.tile_tokens) : 0);
  scratch(moe_tiles_, size_t(max_tiles) + 1);
  bucket_by_expert(ids, n, top_k, int(p.experts), p.shared != 0u, p.tile_tokens, View(moe_offsets_.get()),
                   View(moe_entries_.get()), View(moe_positions_.get()), View(moe_tiles_.get()));
  namespace gu = k::moe_gate_up_tiled;
  Call(*this, gate_up_id).buf(gu::gw, G.data.get()).buf(gu::gs, G.scales.get()).buf(gu::gb, G.biases.get())
      .buf(gu::uw, U.data.get()).buf(gu::us, U.scales.get()).buf(gu::ub, U.biases.get())
      .buf(gu::sgw, SG->data.get()).buf(gu::sgs, SG->scales.get()).buf(gu::sgb, SG->biases.get())
      .buf(gu::suw, SU->data.get()).buf(gu::sus, SU->scales.get()).buf(gu::sub, SU->biases.get()).buf(gu::x, xh)
      .buf(gu::offsets, moe_offsets_.get()).buf(gu::entries, moe_entries_.get()).buf(gu::h, moe_h_.get())
      .buf(gu::sh, moe_shared_h_.get()).params(gu::p, p).buf(gu::tiles, moe_tiles_.get())
      .grid(ceil_div(std::max(G.desc.rows, p.sgate.rows), gate_up_rows), max_tiles).threads(GEMM_THREADS).run();

  namespace dn = k::moe_down_tiled;
  Call(*this, down_id).buf(dn::dw, D.data.get()).buf(dn::ds, D.scales.get()).buf(dn::db, D.biases.get())
      .buf(dn::sdw, SD->data.get()).buf(dn::sds, SD->scales.get()).buf(dn::sdb, SD->biases.get())
      .buf(dn::h, moe_h_.get()).buf(dn::sh, moe_shared_h_.get()).buf(dn::offsets, moe_offsets_.get())
      .buf(dn::entries, moe_entries_.get()).buf(dn::weights, weights)
      .opt(dn::gate_logit, shared.gate ? shared.gate_logit : View()).buf(dn::y, moe_y_.get())
      .buf(dn::ys, moe_shared_y_.get()).params(dn::p, p).buf(dn::tiles, moe_tiles_.get())
      .grid(ceil_div(p.hidden, down_rows), max_tiles).threads(GEMM_THREADS).run();

  namespace cb = k::moe_combine;  // a thread per 4 columns: hidden is a multiple of 4 (rows of 16-byte chunks)
  Call(*this, cb::id).buf(cb::y, moe_y_.get()).buf(cb::ys, moe_shared_y_.get()).buf(cb::positions, moe_positions_.get())
      .buf(cb::out, out).params(cb::p, p).grid(ceil_div(size_t(n) * (p.hidden / 4), ELEMENTWISE_THREADS))
      .threads(ELEMENTWISE_THREADS).run();
}

}  // namespace moelens::gpu
