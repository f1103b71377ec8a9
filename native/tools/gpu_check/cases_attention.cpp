// moelens-gpu-check: attention_prep and causal GQA attention.
#include "check.h"

#include "backends/gpu/ops/attention_split.h"

namespace moelens::gpu_check {

// The split-K build that takes a group of heads / kv query heads per KV head.
static gpu::kernels::Id split_build(int heads, int kv) {
  return heads / kv <= int(ATTN_PARTIAL_GROUP) ? gpu::kernels::attention_partial::id : gpu::kernels::attention_partial_wide::id;
}

// The split-K build on the matrix units for a head dim (the fp16 precision's).
static gpu::kernels::Id half_build(int dim) {
  return dim == 32    ? gpu::kernels::attention_partial_half_32::id
         : dim == 64  ? gpu::kernels::attention_partial_half_64::id
         : dim == 128 ? gpu::kernels::attention_partial_half_128::id
                      : gpu::kernels::attention_partial_half_256::id;
}

// Whether an fp16 call that is not a tiled prefill runs its spans on the matrix units.
static bool half_spans(int heads, int kv, bool probs) { return !probs && heads / kv <= int(ATTN_HALF_GROUP); }

// The matrix-unit split-K kernels' tolerance (fp16 q, k, v and weights, fp32 accumulation): 5e-3 of the
// largest |out|, as the flash-attention kernels'; about 2x the worst measured over the attention_half
// cases with seeds 1-8 (2.3e-3, growing scores; 2.6e-4 to 6.4e-4 for the others).
constexpr float kHalfTolerance = 5e-3f;

// A split-K attention call (below the tiled threshold) against the CPU backend, at the precision the
// GPU backend is set to: the fp32 kernels at fp32, the matrix-unit ones at fp16 where they apply
// (half_spans), each with a combine per launch when the keys make more than one span. `ramp` scales key
// j by 1 + ramp·(j mod 64)/8: scores that grow along every 64 keys.
struct SpanShape {
  int heads, kv, dim, n, pos0;
  bool gated, probs;
  float ramp = 0.0f;
  std::string name() const {
    return std::to_string(heads) + "/" + std::to_string(kv) + "x" + std::to_string(dim) + " n" + std::to_string(n) +
           " at " + std::to_string(pos0) + (gated ? " gated" : "") + (probs ? " probs" : "") + (ramp > 0.0f ? " ramp" : "");
  }
};

static void check_spans(Ctx& c, const SpanShape& a) {
  const int total = a.pos0 + a.n;
  const gpu::AttentionSplit split = gpu::attention_split(size_t(a.n), size_t(total), size_t(a.kv));
  const bool half = c.gpu.precision() == gpu::Precision::F16 && half_spans(a.heads, a.kv, a.probs);
  c.shape = std::to_string(a.heads) + "/" + std::to_string(a.kv) + " heads of " + std::to_string(a.dim) + ", " +
            std::to_string(a.n) + " tokens at " + std::to_string(a.pos0) + ", " + std::to_string(split.splits) + " spans of " +
            std::to_string(split.span) + (a.ramp > 0.0f ? ", growing scores" : "");
  const AttentionShape s{a.heads, a.kv, a.dim, a.dim / 4, a.gated, 1e7f, 1e-6f};
  const size_t kvw = size_t(a.kv) * a.dim, width = size_t(a.n) * a.heads * a.dim;
  std::vector<float> keys = c.rng.normals(size_t(total) * kvw);
  for (size_t j = 0; j < size_t(total); ++j)
    for (size_t i = 0; i < kvw; ++i) keys[j * kvw + i] *= 1.0f + a.ramp * float(j % 64) / 8.0f;
  Pair q = c.floats(c.rng.normals(width)), kc = c.kv_cache(keys, s);
  Pair vc = c.kv_cache(c.rng.normals(size_t(total) * kvw), s), out = c.zeros(width);
  Pair gate = c.floats(c.rng.normals(width, 2.0f));
  const size_t probs_size = size_t(a.heads) * a.n * total;
  Pair probs = c.zeros(probs_size);
  const gpu::kernels::Id build = half ? half_build(a.dim) : split_build(a.heads, a.kv);
  const uint64_t partial0 = c.launches(build);
  const uint64_t combine0 = c.launches(gpu::kernels::attention_combine::id);
  c.cpu.attention(View(q.cpu.get()), View(kc.cpu.get()), View(vc.cpu.get()), a.n, a.pos0, s, View(out.cpu.get()),
                  a.probs ? View(probs.cpu.get()) : View(), a.gated ? View(gate.cpu.get()) : View());
  c.gpu.attention(View(q.gpu.get()), View(kc.gpu.get()), View(vc.gpu.get()), a.n, a.pos0, s, View(out.gpu.get()),
                  a.probs ? View(probs.gpu.get()) : View(), a.gated ? View(gate.gpu.get()) : View());
  const uint64_t partials = c.launches(build) - partial0;
  const uint64_t combines = c.launches(gpu::kernels::attention_combine::id) - combine0;
  if (partials == 0 || combines != (split.splits > 1 ? partials : 0))
    throw Failure(std::string("expected the ") + (half ? "half " : "fp32 ") + "split-K kernel" +
                  (split.splits > 1 ? " and a combine per launch" : " alone") + ", got " + std::to_string(partials) + " and " +
                  std::to_string(combines));
  c.expect_close("attention out", out, width, half ? kHalfTolerance : 1e-5f);
  if (a.probs) c.expect_close("attention probs", probs, probs_size, 1e-5f);
}

void add_attention_cases(Cases& all) {
  const CaseAdder add{all};

  // Head dims 64 with 16 columns rotated, 256 with 64 (the model's), 32 rotated whole and 96 with none:
  // rotated pairs a few columns apart and a lane's width apart, and a head dim not a multiple of 64.
  struct PrepShape {
    int heads, kv, dim, rotary;
  };
  for (PrepShape ps : {PrepShape{4, 2, 64, 16}, PrepShape{16, 2, 256, 64}, PrepShape{2, 1, 32, 32}, PrepShape{3, 1, 96, 0}})
    for (bool gated : {true, false})
      for (ElemType rows : {ElemType::F32, ElemType::F16})
        add(std::string("attention_prep ") + std::to_string(ps.dim) + (gated ? " gated" : "") +
                (rows == ElemType::F16 ? ", half cache rows" : ", fp32 cache rows"),
            [gated, ps, rows](Ctx& c) {
              c.shape = std::to_string(ps.heads) + "/" + std::to_string(ps.kv) + " heads of " + std::to_string(ps.dim) +
                        ", rotary " + std::to_string(ps.rotary) + ", 3 tokens at 1000 into cache rows at 2";
              const AttentionShape s{ps.heads, ps.kv, ps.dim, ps.rotary, gated, 1e7f, 1e-6f};
              const int n = 3, pos0 = 1000, qw = s.heads * s.head_dim * (gated ? 2 : 1);
              const size_t kvw = size_t(n) * s.kv_heads * s.head_dim, at = 2 * size_t(s.kv_heads) * s.head_dim;
              Pair qg = c.floats(c.rng.normals(size_t(n) * qw)), k = c.floats(c.rng.normals(kvw));
              Pair v = c.floats(c.rng.normals(kvw));
              Pair qn = c.floats(c.rng.normals(s.head_dim)), kn = c.floats(c.rng.normals(s.head_dim));
              Pair q = c.zeros(size_t(n) * s.heads * s.head_dim), gate = c.zeros(size_t(n) * s.heads * s.head_dim);
              Pair kr = c.zeros(at + kvw), vr = c.zeros(at + kvw);  // the CPU's rows: fp32
              auto k_rows = c.gpu.alloc(rows, at + kvw), v_rows = c.gpu.alloc(rows, at + kvw);
              c.cpu.attention_prep(View(qg.cpu.get()), View(k.cpu.get()), View(v.cpu.get()), View(qn.cpu.get()),
                                   View(kn.cpu.get()), n, pos0, s, View(q.cpu.get()), View(gate.cpu.get()),
                                   View(kr.cpu.get(), at), View(vr.cpu.get(), at));
              c.gpu.attention_prep(View(qg.gpu.get()), View(k.gpu.get()), View(v.gpu.get()), View(qn.gpu.get()),
                                   View(kn.gpu.get()), n, pos0, s, View(q.gpu.get()), View(gate.gpu.get()),
                                   View(k_rows.get(), at), View(v_rows.get(), at));
              c.expect_close("attention_prep q", q, size_t(n) * s.heads * s.head_dim, 1e-5f);
              c.expect_close("attention_prep k", k, kvw, 1e-5f);
              c.expect_close("attention_prep gate", gate, size_t(n) * s.heads * s.head_dim, 0.0f);
              // The CPU's rows: its k and v. The GPU's: its own k and v as stored (rounded to half by the
              // converting copy for a half cache). Bit for bit; the rows before `at` untouched.
              if (c.read_cpu(kr, kvw, at) != c.read_cpu(k, kvw) || c.read_cpu(vr, kvw, at) != c.read_cpu(v, kvw))
                throw Failure("the CPU backend's cache rows differ from its k and v");
              for (auto [name, got, from] : {std::tuple{"k rows", k_rows.get(), k.gpu.get()}, std::tuple{"v rows", v_rows.get(), v.gpu.get()}}) {
                auto want = c.gpu.alloc(rows, kvw);
                c.gpu.copy(View(want.get()), View(from), kvw);
                const size_t bytes = elem_bytes(rows);
                std::vector<uint8_t> a((at + kvw) * bytes), b(kvw * bytes);
                c.gpu.read(View(got), a.data(), at + kvw);
                c.gpu.read(View(want.get()), b.data(), kvw);
                if (std::any_of(a.begin(), a.begin() + long(at * bytes), [](uint8_t x) { return x != 0; }))
                  throw Failure(std::string("attention_prep wrote before its ") + name);
                if (std::memcmp(a.data() + at * bytes, b.data(), kvw * bytes) != 0)
                  throw Failure(std::string("attention_prep ") + name + " differ from its k and v as stored");
              }
            });

  // Without cache rows (the hook points of k or v are tapped first), only k changes in place.
  add("attention_prep without cache rows", [](Ctx& c) {
    c.shape = "16/2 heads of 256, rotary 64, 2 tokens at 7";
    const AttentionShape s{16, 2, 256, 64, true, 1e7f, 1e-6f};
    const int n = 2, pos0 = 7;
    const size_t kvw = size_t(n) * s.kv_heads * s.head_dim, width = size_t(n) * s.heads * s.head_dim;
    Pair qg = c.floats(c.rng.normals(2 * width)), k = c.floats(c.rng.normals(kvw)), v = c.floats(c.rng.normals(kvw));
    Pair qn = c.floats(c.rng.normals(s.head_dim)), kn = c.floats(c.rng.normals(s.head_dim));
    Pair q = c.zeros(width), gate = c.zeros(width);
    for (Backend* be : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
      const bool gpu = be == &c.gpu;
      be->attention_prep(View(gpu ? qg.gpu.get() : qg.cpu.get()), View(gpu ? k.gpu.get() : k.cpu.get()),
                         View(gpu ? v.gpu.get() : v.cpu.get()), View(gpu ? qn.gpu.get() : qn.cpu.get()),
                         View(gpu ? kn.gpu.get() : kn.cpu.get()), n, pos0, s, View(gpu ? q.gpu.get() : q.cpu.get()),
                         View(gpu ? gate.gpu.get() : gate.cpu.get()), View(), View());
    }
    c.expect_close("attention_prep q", q, width, 1e-5f);
    c.expect_close("attention_prep k", k, kvw, 1e-5f);
  });

  // copy between F32 and F16 buffers (copy_to_half, copy_from_half) and of halves (copy_words): values
  // rounded to nearest even, and back exactly.
  add("copy to and from half", [](Ctx& c) {
    c.shape = "1001 values of every magnitude half takes, and 1000 halves at an even offset";
    std::vector<float> v = c.rng.normals(1001);
    for (size_t i = 0; i < v.size(); ++i) v[i] *= std::ldexp(1.0f, int(i % 40) - 26);  // below half's subnormals to 2^13
    v[0] = 65504.0f, v[1] = -0.0f, v[2] = 1.0f + 1.0f / 2048.0f, v[3] = 1.0f + 3.0f / 2048.0f;  // max, ties to even
    auto src = c.gpu.upload(v), h = c.gpu.alloc(ElemType::F16, v.size()), h2 = c.gpu.alloc(ElemType::F16, v.size() + 1);
    auto back = c.gpu.alloc(ElemType::F32, v.size());
    c.gpu.copy(View(h.get()), View(src.get()), v.size());
    c.gpu.copy(View(h2.get(), 2), View(h.get()), 998);
    c.gpu.copy(View(back.get()), View(h.get()), v.size());
    std::vector<uint16_t> bits(v.size()), bits2(v.size() + 1);
    std::vector<float> wide(v.size());
    c.gpu.read(View(h.get()), bits.data(), v.size());
    c.gpu.read(View(h2.get()), bits2.data(), v.size() + 1);
    c.gpu.read(View(back.get()), wide.data(), v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float r = f16_to_f32(bits[i]);
      // Round to nearest: no half lies between v and r, and a tie went to the even one.
      const float err = std::fabs(r - v[i]);
      const float ulp = std::fabs(f16_to_f32(uint16_t(bits[i] ^ 1u)) - r);
      if (!(err <= ulp / 2) || (err == ulp / 2 && (bits[i] & 1u)))
        throw Failure("value " + std::to_string(i) + " (" + std::to_string(v[i]) + ") rounded to " + std::to_string(r));
      if (wide[i] != r) throw Failure("half " + std::to_string(i) + " widened to " + std::to_string(wide[i]));
      if (i < 998 && bits2[2 + i] != bits[i]) throw Failure("the halves' copy differs at " + std::to_string(i));
    }
    if (bits[2] != 0x3c00u || bits[3] != 0x3c02u) throw Failure("ties not rounded to even");
  });

  struct AttnShape {
    int heads, kv, dim, n, pos0;
    bool probs, gated;
  };
  for (AttnShape a : {AttnShape{4, 2, 64, 3, 70, true, true}, AttnShape{4, 2, 64, 1, 130, false, true},
                      AttnShape{16, 2, 32, 1, 40, true, false}, AttnShape{2, 2, 256, 5, 0, true, true}})
    add("attention " + std::to_string(a.heads) + "/" + std::to_string(a.kv) + "x" + std::to_string(a.dim) + " n" +
            std::to_string(a.n) + " at " + std::to_string(a.pos0) + (a.gated ? " gated" : ""),
        [a](Ctx& c) {
          c.shape = std::to_string(a.heads) + "/" + std::to_string(a.kv) + " heads of " + std::to_string(a.dim) + ", " +
                    std::to_string(a.n) + " tokens at " + std::to_string(a.pos0) + (a.gated ? ", gated" : "");
          const AttentionShape s{a.heads, a.kv, a.dim, a.dim / 4, true, 1e7f, 1e-6f};
          const int total = a.pos0 + a.n;
          const size_t kvw = size_t(a.kv) * a.dim, width = size_t(a.n) * a.heads * a.dim;
          Pair q = c.floats(c.rng.normals(width)), kc = c.floats(c.rng.normals(size_t(total) * kvw));
          Pair vc = c.floats(c.rng.normals(size_t(total) * kvw)), out = c.zeros(width);
          Pair gate = c.floats(c.rng.normals(width, 2.0f));
          Pair probs = c.zeros(size_t(a.heads) * a.n * total + 1);
          const ExactGpu exact(c.gpu);
          c.cpu.attention(View(q.cpu.get()), View(kc.cpu.get()), View(vc.cpu.get()), a.n, a.pos0, s, View(out.cpu.get()),
                          a.probs ? View(probs.cpu.get()) : View(), a.gated ? View(gate.cpu.get()) : View());
          c.gpu.attention(View(q.gpu.get()), View(kc.gpu.get()), View(vc.gpu.get()), a.n, a.pos0, s, View(out.gpu.get()),
                          a.probs ? View(probs.gpu.get()) : View(), a.gated ? View(gate.gpu.get()) : View());
          c.expect_close("attention out", out, width, 1e-5f);
          if (a.probs) c.expect_close("attention probs", probs, size_t(a.heads) * a.n * total + 1, 1e-5f);
        });

  // Prefill calls (n >= CHECK_TILED_FROM at fp16) run the flash-attention kernel of their head dim (shorter
  // ones the split-K kernels on the matrix units, below):
  // fp16 q, k, v and weights, fp32 accumulation. Their tolerance, 5e-3 of the largest |out|, is 2x the
  // worst error measured over these shapes with seeds 1-4 (2.5e-3, the growing scores over 97 keys; 2.5e-4
  // to 6.9e-4 for the others); the same shapes below the threshold, or with probs requested, run the fp32 split-K
  // kernels at 1e-5. `ramp` scales key j by 1 + j/8, so that the scores grow along the keys and the
  // running maximum moves often (without the rescale of the accumulator that case fails). The model's
  // shape (16/2 heads of 256) with growing scores, and prompts of several threadgroups of rows (64 each)
  // and several key tiles, the last threadgroup partly filled, at head dims 256 and 128. Head dim 256 on
  // both its builds: value halves (these launches are short) and, with the halves' threshold at 0, whole.
  struct PrefillShape {
    int heads, kv, dim, n, pos0;
    bool gated, probs;
    float ramp;
    bool whole = false;
  };
  for (PrefillShape a : {PrefillShape{8, 1, 64, 65, 0, true, false, 0.0f}, PrefillShape{8, 1, 256, 16, 21, true, false, 0.0f},
                         PrefillShape{6, 2, 64, 17, 5, false, false, 0.0f}, PrefillShape{2, 2, 128, 24, 40, true, false, 0.0f},
                         PrefillShape{8, 1, 64, 48, 0, true, false, 1.0f}, PrefillShape{6, 2, 32, 33, 0, false, false, 0.0f},
                         PrefillShape{6, 2, 128, 15, 9, true, false, 0.0f}, PrefillShape{8, 2, 64, 20, 3, true, true, 0.0f},
                         PrefillShape{16, 2, 256, 40, 0, true, false, 1.0f}, PrefillShape{8, 1, 256, 70, 30, false, false, 0.0f},
                         PrefillShape{16, 2, 256, 40, 0, true, false, 1.0f, true}, PrefillShape{8, 1, 256, 70, 30, false, false, 0.0f, true},
                         PrefillShape{8, 1, 256, 16, 21, true, false, 0.0f, true}, PrefillShape{4, 1, 128, 90, 7, true, false, 1.0f}})
    add("attention_prefill " + std::to_string(a.heads) + "/" + std::to_string(a.kv) + "x" + std::to_string(a.dim) + " n" +
            std::to_string(a.n) + " at " + std::to_string(a.pos0) + (a.gated ? " gated" : "") + (a.probs ? " probs" : "") +
            (a.ramp > 0.0f ? " ramp" : "") + (a.whole ? " whole" : ""),
        [a](Ctx& c) {
          struct HalvesBelow {  // the default threshold back, however the case ends
            gpu::GpuBackend& gpu;
            HalvesBelow(gpu::GpuBackend& g, size_t below) : gpu(g) { gpu.set_attention_halves_below(below); }
            ~HalvesBelow() { gpu.set_attention_halves_below(ATTN_PREFILL_HALVES_BELOW); }
          } halves_below(c.gpu, a.whole ? 0u : ATTN_PREFILL_HALVES_BELOW);
          const bool tiled = c.gpu.tiled(a.n) && !a.probs;  // (these shapes' caches are half at fp16)
          c.shape = std::to_string(a.heads) + "/" + std::to_string(a.kv) + " heads of " + std::to_string(a.dim) + ", " +
                    std::to_string(a.n) + " tokens at " + std::to_string(a.pos0) + (a.gated ? ", gated" : "") +
                    (a.probs ? ", probs" : "") + (a.ramp > 0.0f ? ", growing scores" : "") + (a.whole ? ", whole" : "");
          const AttentionShape s{a.heads, a.kv, a.dim, a.dim / 4, a.gated, 1e7f, 1e-6f};
          const int total = a.pos0 + a.n;
          const size_t kvw = size_t(a.kv) * a.dim, width = size_t(a.n) * a.heads * a.dim;
          std::vector<float> keys = c.rng.normals(size_t(total) * kvw);
          for (size_t j = 0; j < size_t(total); ++j)
            for (size_t i = 0; i < kvw; ++i) keys[j * kvw + i] *= 1.0f + a.ramp * float(j) / 8.0f;
          Pair q = c.floats(c.rng.normals(width)), kc = c.kv_cache(keys, s);
          Pair vc = c.kv_cache(c.rng.normals(size_t(total) * kvw), s), out = c.zeros(width);
          Pair gate = c.floats(c.rng.normals(width, 2.0f));
          const size_t probs_size = size_t(a.heads) * a.n * total;
          Pair probs = c.zeros(probs_size);
          const std::vector<uint64_t> before = c.gpu.dispatches_by_kernel();
          c.cpu.attention(View(q.cpu.get()), View(kc.cpu.get()), View(vc.cpu.get()), a.n, a.pos0, s, View(out.cpu.get()),
                          a.probs ? View(probs.cpu.get()) : View(), a.gated ? View(gate.cpu.get()) : View());
          c.gpu.attention(View(q.gpu.get()), View(kc.gpu.get()), View(vc.gpu.get()), a.n, a.pos0, s, View(out.gpu.get()),
                          a.probs ? View(probs.gpu.get()) : View(), a.gated ? View(gate.gpu.get()) : View());
          const size_t flash = size_t(a.dim == 32    ? gpu::kernels::attention_prefill_32::id
                                      : a.dim == 64  ? gpu::kernels::attention_prefill_64::id
                                      : a.dim == 128 ? gpu::kernels::attention_prefill_128::id
                                      : a.whole      ? gpu::kernels::attention_prefill_256::id
                                                     : gpu::kernels::attention_prefill_256_halves::id);
          const bool half = !tiled && half_spans(a.heads, a.kv, a.probs);
          const size_t split = size_t(half ? half_build(a.dim) : split_build(a.heads, a.kv));
          const std::vector<uint64_t>& after = c.gpu.dispatches_by_kernel();
          if ((after[flash] > before[flash]) != tiled || (after[split] > before[split]) == tiled)
            throw Failure(std::string("expected the ") + (tiled ? "flash-attention" : half ? "half split-K" : "split-K") + " kernels");
          c.expect_close("attention out", out, width, tiled || half ? kHalfTolerance : 1e-5f);
          if (a.probs) c.expect_close("attention probs", probs, probs_size, 1e-5f);
        });


  // The attention kernels read K and V in 16-byte runs: a cache view that does not start on a 16-byte
  // boundary is refused with the reason, not read misaligned (an fp32 cache here, a half one below).
  add("attention_prefill KV cache view off a 16-byte boundary", [](Ctx& c) {
    c.shape = "8/1 heads of 64, 16 tokens, the K cache view at 1 float";
    const AttentionShape s{8, 1, 64, 16, false, 1e7f, 1e-6f};
    const int n = CHECK_TILED_FROM;
    const size_t width = size_t(n) * s.heads * s.head_dim, kvw = size_t(n) * s.kv_heads * s.head_dim;
    Pair q = c.floats(c.rng.normals(width)), kc = c.floats(c.rng.normals(kvw + 1)), vc = c.floats(c.rng.normals(kvw));
    Pair out = c.zeros(width);
    try {
      c.gpu.attention(View(q.gpu.get()), View(kc.gpu.get(), 1), View(vc.gpu.get()), n, 0, s, View(out.gpu.get()), View(),
                      View());
    } catch (const std::exception& e) {
      if (std::string(e.what()).find("16-byte boundary") != std::string::npos) return;
      throw Failure(std::string("unexpected error: ") + e.what());
    }
    throw Failure("a K cache view at 1 float was accepted");
  });
  add("attention KV cache view of halves off a 16-byte boundary", [](Ctx& c) {
    c.shape = "8/1 heads of 64, 1 token, the half K cache view at 4 halves";
    const AttentionShape s{8, 1, 64, 16, false, 1e7f, 1e-6f};
    const size_t width = size_t(s.heads) * s.head_dim, kvw = size_t(s.kv_heads) * s.head_dim;
    Pair q = c.floats(c.rng.normals(width)), out = c.zeros(width);
    auto kc = c.gpu.alloc(ElemType::F16, kvw + 4), vc = c.gpu.alloc(ElemType::F16, kvw);
    try {
      c.gpu.attention(View(q.gpu.get()), View(kc.get(), 4), View(vc.get()), 1, 0, s, View(out.gpu.get()), View(), View());
    } catch (const std::exception& e) {
      if (std::string(e.what()).find("16-byte boundary") != std::string::npos) return;
      throw Failure(std::string("unexpected error: ") + e.what());
    }
    throw Failure("a half K cache view at 4 halves was accepted");
  });

  // The split-K kernels over spans sized by the context (attention_split.h), at fp32 (the fp16 precision
  // runs the spans on the matrix units, below): contexts around one block (1, 15, 16, 17), ragged spans
  // (300, several thousand keys; 157 spans at 5,000 keys on one KV head, several rounds of the
  // combine's loads), spans ending in or wholly in a token's causal future (several tokens
  // per launch), GQA groups of 1, 8 (attention_partial's largest), 12 and 16 (attention_partial_wide),
  // head dims 256 and small ones, the softmax weights (they read the lse), and prompts of 65 tokens (the
  // fp32 precision's prefill). Exact fp32 arithmetic: the split-K tolerance, 1e-5.
  for (SpanShape a : {SpanShape{8, 1, 256, 1, 0, true, false}, SpanShape{8, 1, 256, 1, 14, true, false},
                      SpanShape{16, 2, 256, 1, 15, false, false}, SpanShape{2, 2, 32, 1, 16, true, false},
                      SpanShape{8, 1, 32, 3, 297, true, true}, SpanShape{16, 2, 256, 1, 4999, true, false},
                      SpanShape{2, 2, 32, 1, 3000, false, false}, SpanShape{8, 1, 48, 8, 2000, true, false},
                      SpanShape{8, 2, 64, 2, 700, true, true}, SpanShape{8, 1, 32, 65, 100, true, false},
                      SpanShape{16, 2, 256, 65, 0, true, false}, SpanShape{2, 2, 128, 15, 1000, false, false},
                      SpanShape{16, 1, 256, 1, 300, true, false}, SpanShape{12, 1, 64, 3, 700, true, true},
                      SpanShape{8, 1, 256, 1, 5000, false, false}})
    add("attention_split " + a.name(), [a](Ctx& c) {
      const ExactGpu exact(c.gpu);
      check_spans(c, a);
    });

  // The same spans at the fp16 precision, on the matrix units (attention_partial_half_<head dim>): one span
  // that writes the output itself (contexts of 1 to 16 keys) or several and the combine; ragged last
  // blocks and spans (17, 300, 4,999 keys); several tokens per launch (spans in a token's future); groups
  // of 1, 3 and 8 query heads per KV head (the products' 8 columns: rows past the group are zero); head
  // dims 32 (two slices of 16), 64, 128 and 256; `ramp` (key j scaled by 1 + ramp·(j mod 64)/8) makes the
  // scores grow along every 64 keys, so that maxima move inside spans of several blocks and the
  // accumulator is rescaled (without the rescale those cases fail). A group of 12 and the softmax weights
  // stay on the fp32 kernels at fp16 too.
  for (SpanShape a : {SpanShape{8, 1, 256, 1, 0, true, false}, SpanShape{8, 1, 256, 1, 15, true, false},
                      SpanShape{16, 2, 256, 1, 16, false, false}, SpanShape{16, 2, 256, 1, 4999, true, false},
                      SpanShape{16, 2, 256, 1, 4999, false, false, 1.0f}, SpanShape{2, 2, 32, 1, 300, false, false},
                      SpanShape{8, 1, 32, 3, 297, true, false}, SpanShape{6, 2, 64, 2, 3000, true, false, 1.0f},
                      SpanShape{2, 2, 128, 15, 1000, false, false}, SpanShape{8, 1, 64, 1, 16, true, false},
                      SpanShape{12, 1, 64, 3, 700, true, false}, SpanShape{8, 2, 64, 2, 700, true, true},
                      SpanShape{8, 1, 256, 1, 5000, true, false}})
    add("attention_half " + a.name(), [a](Ctx& c) { check_spans(c, a); });

  // At fp16 a decode step's combine also writes its output as int16 blocks: the output projection after it
  // quantizes nothing, and its products are those of quantize_int16's blocks, bit for bit (the same
  // rows quantized anew after the output is rewritten in place).
  add("attention_combine int16 blocks for the output projection", [](Ctx& c) {
    c.shape = "16/2 heads of 256, 2 tokens at 300, gated, then a 4-bit 40x4096 matmul";
    const AttentionShape s{16, 2, 256, 64, true, 1e7f, 1e-6f};
    const int n = 2, total = 302;
    const size_t kvw = size_t(s.kv_heads) * s.head_dim, width = size_t(n) * s.heads * s.head_dim;
    Pair q = c.floats(c.rng.normals(width)), kc = c.kv_cache(c.rng.normals(total * kvw), s);
    Pair vc = c.kv_cache(c.rng.normals(total * kvw), s), gate = c.floats(c.rng.normals(width)), out = c.zeros(width);
    HostWeight h(c.rng, "q4", 40, int(s.heads * s.head_dim));
    WeightPair w = upload(c, h);
    Pair y = c.zeros(size_t(n) * 40), again = c.zeros(size_t(n) * 40);
    const uint64_t combines = c.launches(gpu::kernels::attention_combine::id);
    c.gpu.attention(View(q.gpu.get()), View(kc.gpu.get()), View(vc.gpu.get()), n, total - n, s, View(out.gpu.get()), View(),
                    View(gate.gpu.get()));
    if (c.launches(gpu::kernels::attention_combine::id) == combines) throw Failure("expected spans and a combine");
    const uint64_t quantized = c.launches(gpu::kernels::quantize_int16::id);
    c.gpu.matmul(*w.gpu, View(out.gpu.get()), n, View(y.gpu.get()));
    if (c.launches(gpu::kernels::quantize_int16::id) != quantized) throw Failure("the matmul quantized the combine's output");
    c.gpu.scale(View(out.gpu.get()), 1.0f, width);  // a write: its int16 form is forgotten
    c.gpu.matmul(*w.gpu, View(out.gpu.get()), n, View(again.gpu.get()));
    if (c.launches(gpu::kernels::quantize_int16::id) != quantized + 1) throw Failure("the matmul after a write did not quantize");
    if (c.read_gpu(y, size_t(n) * 40) != c.read_gpu(again, size_t(n) * 40))
      throw Failure("the combine's int16 blocks differ from quantize_int16's");
  });

  // The split rule itself: spans of whole blocks, at least the minimum span, covering the keys with no
  // empty span, at most ATTN_MAX_SPLITS, and more than one span only while the launch is short of the
  // target threadgroups.
  add("attention_split rule", [](Ctx& c) {
    c.shape = "tokens 1..4096, keys 1..1e6, 1..8 KV heads";
    for (size_t tokens : {1, 2, 7, 15, 65, 4096})
      for (size_t keys : {1, 15, 16, 17, 64, 65, 300, 4097, 32769, 1000000})
        for (size_t kv : {1, 2, 8}) {
          if (keys < tokens) continue;
          const gpu::AttentionSplit r = gpu::attention_split(tokens, keys, kv);
          const std::string at = " (" + std::to_string(tokens) + " tokens, " + std::to_string(keys) + " keys, " +
                                 std::to_string(kv) + " KV heads: " + std::to_string(r.splits) + " x " + std::to_string(r.span) + ")";
          if (r.span % ATTN_SPLIT_BLOCK != 0 || r.span < ATTN_SPLIT_MIN_SPAN) throw Failure("span" + at);
          if (size_t(r.splits) * r.span < keys || size_t(r.splits - 1) * r.span >= keys) throw Failure("coverage" + at);
          if (r.splits > ATTN_MAX_SPLITS) throw Failure("too many splits" + at);
          if (r.splits > 1 && size_t(r.splits - 1) * tokens * kv >= ATTN_SPLIT_TARGET_THREADGROUPS)
            throw Failure("more splits than the target needs" + at);
        }
  });

  // Head dims the split-K kernels do not take (float4 rows up to ATTN_SPLIT_MAX_HEAD_DIM) fail by name.
  add("attention_split rejects head_dim 30 and 512", [](Ctx& c) {
    c.shape = "2/2 heads of 30 and of 512, 1 token";
    for (int dim : {30, 512}) {
      const AttentionShape s{2, 2, dim, dim / 2, false, 1e7f, 1e-6f};
      Pair q = c.zeros(size_t(2) * dim), kc = c.zeros(size_t(2) * dim), vc = c.zeros(size_t(2) * dim), out = c.zeros(size_t(2) * dim);
      try {
        c.gpu.attention(View(q.gpu.get()), View(kc.gpu.get()), View(vc.gpu.get()), 1, 0, s, View(out.gpu.get()), View(), View());
      } catch (const std::exception& e) {
        if (std::string(e.what()).find("head_dim " + std::to_string(dim)) == std::string::npos)
          throw Failure(std::string("unexpected error: ") + e.what());
        continue;
      }
      throw Failure("head_dim " + std::to_string(dim) + " was accepted");
    }
  });
}

}  // namespace moelens::gpu_check
