// moelens-gpu-check: embed, the residual add, scaling, copies and fills.
#include "check.h"

namespace moelens::gpu_check {

void add_elementwise_cases(Cases& all) {
  const CaseAdder add{all};

  for (std::string fmt : {"q4", "q8", "bf16", "f16", "f32"})
    add("embed " + fmt, [fmt](Ctx& c) {
      c.shape = "vocab 50, hidden 128, 4 ids";
      HostWeight table(c.rng, fmt, 50, 128, 0, fmt == "q8" ? 32 : 64);
      WeightPair t = upload(c, table);
      Pair ids = c.ints({3, 49, 0, 17});
      Pair out = c.zeros(4 * 128);
      c.cpu.embed(*t.cpu, View(ids.cpu.get()), 4, View(out.cpu.get()));
      c.gpu.embed(*t.gpu, View(ids.gpu.get()), 4, View(out.gpu.get()));
      c.expect_close("embed", out, 4 * 128, 1e-6f);
    });

  add("elementwise", [](Ctx& c) {
    c.shape = "1000 elements at offsets";
    const size_t n = 1000;
    Pair a = c.floats(c.rng.normals(n)), b = c.floats(c.rng.normals(n));
    // Copies move bits: their source is uploaded data, so CPU and GPU must agree exactly (arithmetic results
    // may differ by an ulp where a GPU compiler contracts a*b+c into one FMA).
    Pair src = c.floats(c.rng.normals(n));
    Pair out = c.zeros(n + 8), ints = c.ints(std::vector<int32_t>(40, 7));
    for (Backend* be : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
      const bool gp = be == &c.gpu;
      auto V = [&](Pair& p, size_t off = 0) { return View(gp ? p.gpu.get() : p.cpu.get(), off); };
      be->add(V(a, 3), V(b, 5), n - 10, 0.5f);
      be->scale(V(b), -1.25f, n);
      be->copy(V(out, 8), V(src), n);
      be->fill(V(out), 2.5f, 8);
      be->fill(V(ints, 4), 0.0f, 30);
    }
    c.expect_close("add", a, n, 1e-6f);
    c.expect_close("scale", b, n, 1e-6f);
    c.expect_close("copy/fill", out, n + 8, 0.0f);
    c.expect_equal_ints("fill of an int buffer", ints, 40);
  });

}

}  // namespace moelens::gpu_check
