// moelens-gpu-check: routing and the routed plus shared experts.
#include "check.h"

namespace moelens::gpu_check {

void add_moe_cases(Cases& all) {
  const CaseAdder add{all};

  // ties: integer logits, so that many probabilities are equal (lower ids first); enabled: all but
  // this many experts are disabled, so that experts of probability 0 fill the top-k.
  struct RouteShape {
    int n, experts, k;
    bool renorm, bias, probs, ties = false;
    int enabled = 0;
  };
  for (RouteShape r : {RouteShape{3, 40, 6, true, false, true}, RouteShape{2, 300, 8, false, true, true},
                       RouteShape{4, 16, 4, true, true, false}, RouteShape{1, 512, 10, true, true, true},
                       RouteShape{3, 256, 8, true, false, true, true}, RouteShape{2, 100, 40, true, true, false, true},
                       RouteShape{2, 64, 9, true, true, true, false, 4}})
    add("route " + std::to_string(r.experts) + " top-" + std::to_string(r.k) + (r.bias ? " biased" : "") +
            (r.ties ? " ties" : "") + (r.enabled ? " " + std::to_string(r.enabled) + " enabled" : ""),
        [r](Ctx& c) {
      c.shape = std::to_string(r.n) + " tokens";
      std::vector<float> l = c.rng.normals(size_t(r.n) * r.experts, 2.0f);
      if (r.ties)
        for (float& v : l) v = std::round(v);
      Pair logits = c.floats(l);
      std::vector<float> bias(size_t(r.n) * r.experts, 0.0f);
      if (r.enabled)
        for (size_t i = 0; i < bias.size(); ++i) bias[i] = int(i % size_t(r.experts)) % (r.experts / r.enabled) ? -INFINITY : 0.0f;
      else if (r.bias)
        for (int t = 0; t < r.n; ++t) {
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = -INFINITY;
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = INFINITY;
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = 1.5f;
        }
      Pair b = c.floats(bias), ids = c.ints(std::vector<int32_t>(size_t(r.n) * r.k, -1));
      Pair w = c.zeros(size_t(r.n) * r.k), probs = c.zeros(size_t(r.n) * r.experts);
      c.cpu.route(View(logits.cpu.get()), r.bias ? View(b.cpu.get()) : View(), r.n, r.experts, r.k, r.renorm,
                  View(ids.cpu.get()), View(w.cpu.get()), r.probs ? View(probs.cpu.get()) : View());
      c.gpu.route(View(logits.gpu.get()), r.bias ? View(b.gpu.get()) : View(), r.n, r.experts, r.k, r.renorm,
                  View(ids.gpu.get()), View(w.gpu.get()), r.probs ? View(probs.gpu.get()) : View());
      c.expect_equal_ints("route ids", ids, size_t(r.n) * r.k);
      c.expect_close("route weights", w, size_t(r.n) * r.k, 1e-5f);
      if (r.probs) c.expect_close("route probs", probs, size_t(r.n) * r.experts, 1e-5f);
    });

  // Wide: long expert rows, so that moe_down splits its blocks over several simdgroups (split-K).
  for (std::string fmt : {"q4", "q8", "bf16"})
    for (int n : {1, 3})
      for (int variant : {0, 1, 2})  // 0: routed only, 1: with the shared expert, 2: wide, with the shared expert
        add("moe_experts " + fmt + " n" + std::to_string(n) + (variant ? " + shared" : "") + (variant == 2 ? " wide" : ""),
            [fmt, n, variant](Ctx& c) {
          const bool with_shared = variant > 0, wide = variant == 2;
          const int E = wide ? 5 : 6, H = wide ? 64 : 128, I = wide ? 1024 : 64, K = wide ? 4 : 3, SI = wide ? 512 : 96;
          c.shape = std::to_string(E) + " experts " + std::to_string(H) + "x" + std::to_string(I) + " top-" + std::to_string(K) +
                    (with_shared ? ", shared expert " + std::to_string(SI) + " scaled 0.7" : "");
          HostWeight g(c.rng, fmt, I, H, E), u(c.rng, fmt, I, H, E), d(c.rng, fmt, H, I, E, fmt == "q8" ? 32 : 64);
          HostWeight sg(c.rng, fmt, SI, H), su(c.rng, fmt, SI, H), sd(c.rng, fmt, H, SI, 0, 32);
          WeightPair G = upload(c, g), U = upload(c, u), D = upload(c, d);
          WeightPair SG = upload(c, sg), SU = upload(c, su), SD = upload(c, sd);
          std::vector<int32_t> id;
          std::vector<float> wt;
          for (int t = 0; t < n; ++t)
            for (int s = 0; s < K; ++s) id.push_back((t * 2 + s * 3) % E), wt.push_back(c.rng.uniform(0.1f, 0.5f));
          Pair ids = c.ints(id), w = c.floats(wt), x = c.floats(c.rng.normals(size_t(n) * H)), out = c.zeros(size_t(n) * H);
          Pair gl = c.floats(c.rng.normals(n));
          Backend::SharedExpert shc, shg;
          if (with_shared) {
            shc = {SG.cpu.get(), SU.cpu.get(), SD.cpu.get(), View(gl.cpu.get()), 0.7f};
            shg = {SG.gpu.get(), SU.gpu.get(), SD.gpu.get(), View(gl.gpu.get()), 0.7f};
          }
          c.cpu.moe_experts(*G.cpu, *U.cpu, *D.cpu, View(x.cpu.get()), View(ids.cpu.get()), View(w.cpu.get()), n, K,
                            View(out.cpu.get()), shc);
          c.gpu.moe_experts(*G.gpu, *U.gpu, *D.gpu, View(x.gpu.get()), View(ids.gpu.get()), View(w.gpu.get()), n, K,
                            View(out.gpu.get()), shg);
          c.expect_close("moe_experts", out, size_t(n) * H, 2e-5f);
        });

}

}  // namespace moelens::gpu_check
