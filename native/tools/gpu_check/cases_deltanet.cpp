// moelens-gpu-check: the causal conv with SiLU and the gated delta rule.
#include "check.h"

namespace moelens::gpu_check {

void add_deltanet_cases(Cases& all) {
  const CaseAdder add{all};

  // n below CHECK_TILED_FROM runs conv_silu (one thread per channel), n at or above it the
  // token-parallel conv_silu_tokens and conv_state_update: ragged token tiles and channel blocks, and
  // kernels of 1 (no state), 4 (the model's) and 7 taps.
  struct ConvShape {
    int n, channels, kernel;
  };
  for (ConvShape s : {ConvShape{1, 300, 4}, ConvShape{5, 300, 4}, ConvShape{CHECK_TILED_FROM, 300, 4},
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

  // One token, or a traced state norm, runs `deltanet`; longer calls deltanet_prep and deltanet_tokens:
  // blocks of DELTANET_BLOCK tokens, ragged last blocks, an odd count (the last token's step without a second),
  // value_dim not a multiple of the threadgroup's DELTANET_TOKENS_COLUMNS (24: columns past it computed,
  // not stored), GQA (16 value heads on one key head of 24 keys: more gate lanes than key lanes), key_dim
  // below the staged width (24, 32, 64: zero-padded keys) and 130 tokens crossing two 64-token boundaries.
  // Both leave the state the next call continues from.
  enum class Traced { none, gates, all };
  struct DnShape {
    int kh, vh, dk, dv, n;
    Traced trace;
  };
  for (DnShape d : {DnShape{2, 4, 64, 64, 1, Traced::all}, DnShape{2, 4, 64, 64, 4, Traced::none},
                    DnShape{1, 2, 128, 32, 3, Traced::all}, DnShape{2, 2, 32, 96, 2, Traced::all},
                    DnShape{2, 4, 128, 96, 2, Traced::none}, DnShape{1, 2, 24, 16, 5, Traced::none},
                    DnShape{2, 4, 128, 128, int(DELTANET_BLOCK), Traced::gates}, DnShape{2, 4, 64, 24, 17, Traced::none},
                    DnShape{2, 6, 32, 32, 65, Traced::gates}, DnShape{1, 16, 24, 16, 9, Traced::none},
                    DnShape{1, 2, 128, 64, 130, Traced::none}})
    add("deltanet " + std::to_string(d.vh) + "x" + std::to_string(d.dk) + "x" + std::to_string(d.dv) + " n" +
            std::to_string(d.n) + (d.trace == Traced::all ? " traced" : d.trace == Traced::gates ? " gates traced" : ""),
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
          if (d.trace != Traced::none) {
            const bool norm = d.trace == Traced::all;
            trc = {View(tb.cpu.get()), View(td.cpu.get()), norm ? View(tn.cpu.get()) : View()};
            trg = {View(tb.gpu.get()), View(td.gpu.get()), norm ? View(tn.gpu.get()) : View()};
          }
          c.cpu.deltanet(View(qkv.cpu.get()), View(b.cpu.get()), View(a.cpu.get()), View(A.cpu.get()), View(dt.cpu.get()),
                         View(st.cpu.get()), d.n, s, View(out.cpu.get()), trc);
          c.gpu.deltanet(View(qkv.gpu.get()), View(b.gpu.get()), View(a.gpu.get()), View(A.gpu.get()), View(dt.gpu.get()),
                         View(st.gpu.get()), d.n, s, View(out.gpu.get()), trg);
          c.expect_close("deltanet out", out, size_t(d.n) * d.vh * d.dv, 1e-4f);
          c.expect_close("deltanet state", st, size_t(d.vh) * d.dk * d.dv, 1e-4f);
          if (d.trace != Traced::none) {
            c.expect_close("deltanet beta", tb, size_t(d.n) * d.vh, 1e-6f);
            c.expect_close("deltanet decay", td, size_t(d.n) * d.vh, 1e-5f);
          }
          if (d.trace == Traced::all) c.expect_close("deltanet state norm", tn, size_t(d.n) * d.vh, 1e-5f);
        });

  // A prompt of two blocks and a lone token on deltanet_tokens, then tokens one by one on `deltanet` from the
  // state it leaves.
  add("deltanet prefill then decode", [](Ctx& c) {
    const int n = 2 * int(DELTANET_BLOCK) + 1, steps = 3, kh = 2, vh = 4, dk = 128, dv = 64;
    c.shape = "2/4 heads, dk 128, dv 64, " + std::to_string(n) + " tokens then 3 one by one";
    const int conv_dim = 2 * kh * dk + vh * dv, total = n + steps;
    const DeltaNetShape s{kh, vh, dk, dv, 1e-6f};
    Pair qkv = c.floats(c.rng.normals(size_t(total) * conv_dim)), b = c.floats(c.rng.normals(size_t(total) * vh));
    Pair a = c.floats(c.rng.normals(size_t(total) * vh)), A = c.floats(c.rng.normals(vh, 0.5f));
    Pair dt = c.floats(c.rng.normals(vh)), st = c.floats(c.rng.normals(size_t(vh) * dk * dv, 0.1f));
    Pair out = c.zeros(size_t(total) * vh * dv);
    for (int t0 : {0, n, n + 1, n + 2}) {
      const int m = t0 == 0 ? n : 1;
      const size_t x = size_t(t0) * conv_dim, g = size_t(t0) * vh, o = size_t(t0) * vh * dv;
      c.cpu.deltanet(View(qkv.cpu.get(), x), View(b.cpu.get(), g), View(a.cpu.get(), g), View(A.cpu.get()),
                     View(dt.cpu.get()), View(st.cpu.get()), m, s, View(out.cpu.get(), o), {});
      c.gpu.deltanet(View(qkv.gpu.get(), x), View(b.gpu.get(), g), View(a.gpu.get(), g), View(A.gpu.get()),
                     View(dt.gpu.get()), View(st.gpu.get()), m, s, View(out.gpu.get(), o), {});
    }
    c.expect_close("deltanet out", out, size_t(total) * vh * dv, 1e-4f);
    c.expect_close("deltanet state", st, size_t(vh) * dk * dv, 1e-4f);
  });

}

}  // namespace moelens::gpu_check
