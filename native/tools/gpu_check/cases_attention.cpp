// moelens-gpu-check: attention_prep and causal GQA attention.
#include "check.h"

namespace moelens::gpu_check {

void add_attention_cases(Cases& all) {
  const CaseAdder add{all};

  for (bool gated : {true, false})
    add(std::string("attention_prep") + (gated ? " gated" : ""), [gated](Ctx& c) {
      c.shape = "4/2 heads of 64, rotary 16, 3 tokens at 1000";
      const AttentionShape s{4, 2, 64, 16, gated, 1e7f, 1e-6f};
      const int n = 3, pos0 = 1000, qw = s.heads * s.head_dim * (gated ? 2 : 1);
      Pair qg = c.floats(c.rng.normals(size_t(n) * qw)), k = c.floats(c.rng.normals(size_t(n) * s.kv_heads * s.head_dim));
      Pair qn = c.floats(c.rng.normals(s.head_dim)), kn = c.floats(c.rng.normals(s.head_dim));
      Pair q = c.zeros(size_t(n) * s.heads * s.head_dim), gate = c.zeros(size_t(n) * s.heads * s.head_dim);
      c.cpu.attention_prep(View(qg.cpu.get()), View(k.cpu.get()), View(qn.cpu.get()), View(kn.cpu.get()), n, pos0, s,
                           View(q.cpu.get()), View(gate.cpu.get()));
      c.gpu.attention_prep(View(qg.gpu.get()), View(k.gpu.get()), View(qn.gpu.get()), View(kn.gpu.get()), n, pos0, s,
                           View(q.gpu.get()), View(gate.gpu.get()));
      c.expect_close("attention_prep q", q, size_t(n) * s.heads * s.head_dim, 1e-5f);
      c.expect_close("attention_prep k", k, size_t(n) * s.kv_heads * s.head_dim, 1e-5f);
      c.expect_close("attention_prep gate", gate, size_t(n) * s.heads * s.head_dim, 0.0f);
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
          c.cpu.attention(View(q.cpu.get()), View(kc.cpu.get()), View(vc.cpu.get()), a.n, a.pos0, s, View(out.cpu.get()),
                          a.probs ? View(probs.cpu.get()) : View(), a.gated ? View(gate.cpu.get()) : View());
          c.gpu.attention(View(q.gpu.get()), View(kc.gpu.get()), View(vc.gpu.get()), a.n, a.pos0, s, View(out.gpu.get()),
                          a.probs ? View(probs.gpu.get()) : View(), a.gated ? View(gate.gpu.get()) : View());
          c.expect_close("attention out", out, width, 1e-5f);
          if (a.probs) c.expect_close("attention probs", probs, size_t(a.heads) * a.n * total + 1, 1e-5f);
        });

}

}  // namespace moelens::gpu_check
