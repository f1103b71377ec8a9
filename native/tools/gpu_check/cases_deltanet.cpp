// moelens-gpu-check: the causal conv with SiLU and the gated delta rule.
#include "check.h"

namespace moelens::gpu_check {

namespace {

// The chunked rule's tolerance against the fp32 CPU reference, the token-by-token kernel's: every product
// is fp32, summed in another order than the recurrence; the cases below measure up to 3.4e-6 of the
// largest output. The rule with fp16 operands fails it: 0.6-1.1e-3 on random inputs, 1.8-2.8e-3 on the
// model-like ones.
constexpr float kDeltaNetChunkTol = 1e-4f;

// What the inputs look like. Random: independent normals (keys nearly orthogonal, decays around 0.45 per
// token, so a token hardly sees the tokens 8 before it). Model-like: as a trained model's DeltaNet layer
// sees them after the conv and SiLU: keys that share a direction (k·k' of 0.8-0.96 after the l2 norm),
// decays of 0.96-1 per token (median 0.997), β near 0.9 and values of a few units, so the whole chunk
// and the state of the earlier chunks take part in every output: where fp16 rounding costs the most.
enum class DeltaNetData { Random, ModelLike };

std::vector<float> silu_of(std::vector<float> x) {
  for (float& v : x) v = v / (1.0f + std::exp(-v));
  return x;
}

// Inputs of the gated delta rule for n tokens, on both backends, and the calls over a range of them.
struct DeltaNetInputs {
  DeltaNetShape s;
  int n;
  Pair qkv, b, a, A, dt, st, out, tb, td, tn;
  DeltaNetInputs(Ctx& c, const DeltaNetShape& shape, int tokens, DeltaNetData data = DeltaNetData::Random)
      : s(shape), n(tokens) {
    const size_t H = size_t(s.value_heads);
    if (data == DeltaNetData::Random) {
      qkv = c.floats(c.rng.normals(size_t(n) * conv_dim()));
      b = c.floats(c.rng.normals(size_t(n) * H));
      a = c.floats(c.rng.normals(size_t(n) * H));
      A = c.floats(c.rng.normals(H, 0.5f));
      dt = c.floats(c.rng.normals(H));
    } else {
      // q and k: a shared direction of each key head plus noise; v: normals of scale 2.
      const size_t key_total = size_t(s.key_heads) * s.key_dim;
      const std::vector<float> common = c.rng.normals(key_total, 3.0f);
      std::vector<float> x = c.rng.normals(size_t(n) * conv_dim());
      for (size_t t = 0; t < size_t(n); ++t)
        for (size_t i = 0; i < 2 * key_total; ++i) x[t * conv_dim() + i] += common[i % key_total];
      x = silu_of(x);
      for (size_t t = 0; t < size_t(n); ++t)
        for (size_t i = 2 * key_total; i < conv_dim(); ++i) x[t * conv_dim() + i] *= 2.0f;
      qkv = c.floats(x);
      std::vector<float> bb = c.rng.normals(size_t(n) * H, 0.5f);
      for (float& v : bb) v += 2.5f;  // β = sigmoid(b) around 0.92
      b = c.floats(bb);
      a = c.floats(c.rng.normals(size_t(n) * H));
      // g = -exp(A_log)·softplus(a + dt_bias): A_log around -2 and dt_bias around -4 give decays near 1.
      std::vector<float> A_log = c.rng.normals(H, 0.5f), bias = c.rng.normals(H, 0.5f);
      for (float& v : A_log) v -= 2.0f;
      for (float& v : bias) v -= 4.0f;
      A = c.floats(A_log);
      dt = c.floats(bias);
    }
    st = c.floats(c.rng.normals(state_size(), 0.1f));
    out = c.zeros(out_size());
    tb = c.zeros(size_t(n) * s.value_heads);
    td = c.zeros(size_t(n) * s.value_heads);
    tn = c.zeros(size_t(n) * s.value_heads);
  }
  size_t conv_dim() const { return size_t(2 * s.key_heads * s.key_dim + s.value_heads * s.value_dim); }
  size_t state_size() const { return size_t(s.value_heads) * s.key_dim * s.value_dim; }
  size_t out_size() const { return size_t(n) * s.value_heads * s.value_dim; }
  std::string describe() const {
    return std::to_string(s.key_heads) + "/" + std::to_string(s.value_heads) + " heads, dk " + std::to_string(s.key_dim) +
           ", dv " + std::to_string(s.value_dim) + ", " + std::to_string(n) + " tokens";
  }
  // Tokens t0 .. t0+m-1 on both backends.
  void run(Ctx& c, int t0, int m, bool trace, bool trace_norm) {
    const size_t t = size_t(t0), H = size_t(s.value_heads);
    auto call = [&](Backend& be, std::unique_ptr<Buffer> Pair::*side) {
      DeltaNetTrace tr;
      if (trace) tr = {View(tb.*side, t * H), View(td.*side, t * H), trace_norm ? View(tn.*side, t * H) : View()};
      be.deltanet(View(qkv.*side, t * conv_dim()), View(b.*side, t * H), View(a.*side, t * H), View(A.*side),
                  View(dt.*side), View(st.*side), m, s, View(out.*side, t * H * s.value_dim), tr);
    };
    call(c.cpu, &Pair::cpu);
    call(c.gpu, &Pair::gpu);
  }
  void expect_close(Ctx& c, float tol, bool trace, bool trace_norm) {
    c.expect_close("deltanet out", out, out_size(), tol);
    c.expect_close("deltanet state", st, state_size(), tol);
    if (trace) {
      c.expect_close("deltanet beta", tb, size_t(n) * s.value_heads, 1e-6f);
      c.expect_close("deltanet decay", td, size_t(n) * s.value_heads, 1e-5f);
    }
    if (trace_norm) c.expect_close("deltanet state norm", tn, size_t(n) * s.value_heads, 1e-5f);
  }
};

// max |x - y| / max |y| within tol, for two results of the GPU backend.
void expect_close_gpu(const char* what, const std::vector<float>& x, const std::vector<float>& y, float tol) {
  float scale = 0.f, worst = 0.f;
  for (size_t i = 0; i < y.size(); ++i) {
    scale = std::max(scale, std::fabs(y[i]));
    if (!(std::fabs(x[i] - y[i]) <= worst)) worst = std::fabs(x[i] - y[i]);
  }
  if (!(worst / std::max(scale, 1e-20f) <= tol))
    throw Failure(std::string(what) + ": relative error " + std::to_string(worst / std::max(scale, 1e-20f)) + " > " +
                  std::to_string(tol));
}

}  // namespace

void add_deltanet_cases(Cases& all) {
  const CaseAdder add{all};

  // n below PREFILL_MIN_TOKENS runs conv_silu (one thread per channel), n at or above it the
  // token-parallel conv_silu_tokens and conv_state_update: ragged token tiles and channel blocks, and
  // kernels of 1 (no state), 4 (the model's) and 7 taps.
  struct ConvShape {
    int n, channels, kernel;
  };
  for (ConvShape s : {ConvShape{1, 300, 4}, ConvShape{5, 300, 4}, ConvShape{int(PREFILL_MIN_TOKENS), 300, 4},
                      ConvShape{65, 300, 4}, ConvShape{130, 257, 4}, ConvShape{40, 300, 1}, ConvShape{37, 70, 7}})
    add("conv_silu n" + std::to_string(s.n) + " c" + std::to_string(s.channels) + " k" + std::to_string(s.kernel),
        [s](Ctx& c) {
          c.shape = std::to_string(s.channels) + " channels, kernel " + std::to_string(s.kernel) + ", " +
                    std::to_string(s.n) + " tokens";
          const int n = s.n, channels = s.channels, kernel = s.kernel;
          const size_t past = size_t(kernel - 1) * channels;
          Pair x = c.floats(c.rng.normals(size_t(n) * channels)), st = c.floats(c.rng.normals(std::max<size_t>(past, 1)));
          Pair w = c.floats(c.rng.normals(size_t(channels) * kernel)), out = c.zeros(size_t(n) * channels);
          c.cpu.conv_silu(View(x.cpu.get()), View(st.cpu.get()), View(w.cpu.get()), n, channels, kernel, View(out.cpu.get()));
          c.gpu.conv_silu(View(x.gpu.get()), View(st.gpu.get()), View(w.gpu.get()), n, channels, kernel, View(out.gpu.get()));
          c.expect_close("conv_silu out", out, size_t(n) * channels, 1e-6f);
          c.expect_close("conv_silu state", st, past, 0.0f);
        });

  // A prompt chunk on the token-parallel kernels leaves the state the one-token conv continues from.
  add("conv_silu prefill then decode", [](Ctx& c) {
    const int n = 70, channels = 300, kernel = 4, steps = 3;
    c.shape = "300 channels, kernel 4, 70 tokens then 3 one by one";
    Pair x = c.floats(c.rng.normals(size_t(n + steps) * channels)), st = c.floats(c.rng.normals(size_t(kernel - 1) * channels));
    Pair w = c.floats(c.rng.normals(size_t(channels) * kernel)), out = c.zeros(size_t(n + steps) * channels);
    for (int t0 : {0, n, n + 1, n + 2}) {
      const int m = t0 == 0 ? n : 1;
      const size_t at = size_t(t0) * channels;
      c.cpu.conv_silu(View(x.cpu.get(), at), View(st.cpu.get()), View(w.cpu.get()), m, channels, kernel, View(out.cpu.get(), at));
      c.gpu.conv_silu(View(x.gpu.get(), at), View(st.gpu.get()), View(w.gpu.get()), m, channels, kernel, View(out.gpu.get(), at));
    }
    c.expect_close("conv_silu out", out, size_t(n + steps) * channels, 1e-6f);
    c.expect_close("conv_silu state", st, size_t(kernel - 1) * channels, 0.0f);
  });

  struct DnShape {
    int kh, vh, dk, dv, n;
    bool trace;
  };
  for (DnShape d : {DnShape{2, 4, 64, 64, 1, true}, DnShape{2, 4, 64, 64, 4, false}, DnShape{1, 2, 128, 32, 3, true},
                    DnShape{2, 2, 32, 96, 2, true}, DnShape{2, 4, 128, 96, 2, false}})
    add("deltanet " + std::to_string(d.vh) + "x" + std::to_string(d.dk) + "x" + std::to_string(d.dv) + " n" +
            std::to_string(d.n) + (d.trace ? " traced" : ""),
        [d](Ctx& c) {
          c.shape = std::to_string(d.kh) + "/" + std::to_string(d.vh) + " heads, dk " + std::to_string(d.dk) + ", dv " +
                    std::to_string(d.dv) + ", " + std::to_string(d.n) + " tokens";
          const int conv_dim = 2 * d.kh * d.dk + d.vh * d.dv;
          const DeltaNetShape s{d.kh, d.vh, d.dk, d.dv, 1e-6f};
          Pair qkv = c.floats(c.rng.normals(size_t(d.n) * conv_dim)), b = c.floats(c.rng.normals(size_t(d.n) * d.vh));
          Pair a = c.floats(c.rng.normals(size_t(d.n) * d.vh)), A = c.floats(c.rng.normals(d.vh, 0.5f));
          Pair dt = c.floats(c.rng.normals(d.vh)), st = c.floats(c.rng.normals(size_t(d.vh) * d.dk * d.dv, 0.1f));
          Pair out = c.zeros(size_t(d.n) * d.vh * d.dv), tb = c.zeros(size_t(d.n) * d.vh), td = c.zeros(size_t(d.n) * d.vh),
               tn = c.zeros(size_t(d.n) * d.vh);
          DeltaNetTrace trc, trg;
          if (d.trace) {
            trc = {View(tb.cpu.get()), View(td.cpu.get()), View(tn.cpu.get())};
            trg = {View(tb.gpu.get()), View(td.gpu.get()), View(tn.gpu.get())};
          }
          c.cpu.deltanet(View(qkv.cpu.get()), View(b.cpu.get()), View(a.cpu.get()), View(A.cpu.get()), View(dt.cpu.get()),
                         View(st.cpu.get()), d.n, s, View(out.cpu.get()), trc);
          c.gpu.deltanet(View(qkv.gpu.get()), View(b.gpu.get()), View(a.gpu.get()), View(A.gpu.get()), View(dt.gpu.get()),
                         View(st.gpu.get()), d.n, s, View(out.gpu.get()), trg);
          c.expect_close("deltanet out", out, size_t(d.n) * d.vh * d.dv, 1e-4f);
          c.expect_close("deltanet state", st, size_t(d.vh) * d.dk * d.dv, 1e-4f);
          if (d.trace) {
            c.expect_close("deltanet beta", tb, size_t(d.n) * d.vh, 1e-6f);
            c.expect_close("deltanet decay", td, size_t(d.n) * d.vh, 1e-5f);
            c.expect_close("deltanet state norm", tn, size_t(d.n) * d.vh, 1e-5f);
          }
        });


  // Prompts: at PREFILL_MIN_TOKENS tokens and above the chunked rule (deltanet_chunk_prep, then
  // deltanet_chunk_scan) unless the state norm is traced. fp16 operands in the matrix products:
  // kDeltaNetChunkTol (below) against the fp32 CPU reference.
  struct ChunkShape {
    int kh, vh, dk, dv, n;
    bool trace;  // β and decay (the state norm takes the token-by-token kernel, case below)
  };
  // The model's key_dim = value_dim = 128 and small ones; below and at the threshold, one chunk and a token
  // (65), positions across two chunk boundaries (130), a group of 3 value heads per key head, and a prompt
  // over several passes (1100).
  for (ChunkShape d : {ChunkShape{2, 4, 32, 16, int(PREFILL_MIN_TOKENS) - 1, false},
                       ChunkShape{2, 4, 32, 16, int(PREFILL_MIN_TOKENS), false}, ChunkShape{1, 1, 128, 128, 65, true},
                       ChunkShape{1, 3, 16, 48, 70, false}, ChunkShape{1, 2, 32, 16, 130, true},
                       ChunkShape{1, 1, 16, 16, 1100, false}})
    add("deltanet chunked " + std::to_string(d.vh) + "x" + std::to_string(d.dk) + "x" + std::to_string(d.dv) + " n" +
            std::to_string(d.n) + (d.trace ? " traced" : ""),
        [d](Ctx& c) {
          DeltaNetInputs in(c, {d.kh, d.vh, d.dk, d.dv, 1e-6f}, d.n);
          c.shape = in.describe();
          in.run(c, 0, d.n, d.trace, false);
          in.expect_close(c, kDeltaNetChunkTol, d.trace, false);
        });

  // Model-like inputs (alike keys, decays near 1) at the fixtures' shapes: 2 key heads of 64 for 4 value
  // heads of 64, and 2 key heads of 32 for 6 value heads of 32 (3 value heads per key head), over 130
  // tokens (two chunk boundaries); and the full model's head dims over two chunks.
  for (ChunkShape d : {ChunkShape{2, 4, 64, 64, 130, true}, ChunkShape{2, 6, 32, 32, 130, false},
                       ChunkShape{1, 2, 128, 128, 128, false}})
    add("deltanet chunked model-like " + std::to_string(d.kh) + "/" + std::to_string(d.vh) + "x" + std::to_string(d.dk) +
            "x" + std::to_string(d.dv) + " n" + std::to_string(d.n),
        [d](Ctx& c) {
          DeltaNetInputs in(c, {d.kh, d.vh, d.dk, d.dv, 1e-6f}, d.n, DeltaNetData::ModelLike);
          c.shape = in.describe() + ", model-like";
          in.run(c, 0, d.n, d.trace, false);
          in.expect_close(c, kDeltaNetChunkTol, d.trace, false);
        });

  add("deltanet chunked n20 state norm traced", [](Ctx& c) {
    DeltaNetInputs in(c, {2, 4, 32, 16, 1e-6f}, 20);
    c.shape = in.describe() + ", state norm traced";
    in.run(c, 0, 20, true, true);
    in.expect_close(c, 1e-4f, true, true);  // the token-by-token kernel: its own tolerance
  });

  // Two calls: the second continues from the state the first left (positions cross chunk boundaries).
  add("deltanet chunked two calls", [](Ctx& c) {
    DeltaNetInputs in(c, {1, 2, 64, 32, 1e-6f}, 130);
    c.shape = in.describe() + " in calls of 70 and 60";
    in.run(c, 0, 70, false, false);
    in.run(c, 70, 60, false, false);
    in.expect_close(c, kDeltaNetChunkTol, false, false);
  });

  // The state after a chunked prefill against the state after the same tokens one by one, both on the GPU.
  add("deltanet chunked state vs one by one", [](Ctx& c) {
    const DeltaNetShape s{1, 1, 128, 128, 1e-6f};
    const int n = 70;
    DeltaNetInputs in(c, s, n, DeltaNetData::ModelLike);
    c.shape = in.describe() + ", then one by one";
    Pair st2 = c.floats(c.read_gpu(in.st, in.state_size())), out2 = c.zeros(in.out_size());
    in.run(c, 0, n, false, false);
    for (int t = 0; t < n; ++t)
      c.gpu.deltanet(View(in.qkv.gpu, size_t(t) * in.conv_dim()), View(in.b.gpu, size_t(t) * s.value_heads),
                     View(in.a.gpu, size_t(t) * s.value_heads), View(in.A.gpu), View(in.dt.gpu), View(st2.gpu), 1, s,
                     View(out2.gpu, size_t(t) * s.value_heads * s.value_dim), DeltaNetTrace{});
    expect_close_gpu("state, chunked vs one by one", c.read_gpu(in.st, in.state_size()), c.read_gpu(st2, in.state_size()),
                     kDeltaNetChunkTol);
    expect_close_gpu("out, chunked vs one by one", c.read_gpu(in.out, in.out_size()), c.read_gpu(out2, in.out_size()),
                     kDeltaNetChunkTol);
  });
}

}  // namespace moelens::gpu_check
