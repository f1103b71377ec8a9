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

  // The same work submitted again on a new, larger buffer: a runtime that replays recorded work (CUDA
  // graphs) must bind the new buffer, although the freed buffer's handle is often reused for the next
  // one. Buffers allocated around each one keep its memory's neighbours in use, so that the next, larger
  // buffer lies elsewhere.
  add("replaced buffers", [](Ctx& c) {
    c.shape = "scale of 256 elements in buffers of 256 to 262,144";
    const size_t n = 256;
    std::vector<Pair> neighbours;
    neighbours.push_back(c.zeros(n));
    Pair a;
    for (size_t size = n; size <= 262144; size *= 4) {
      const std::vector<float> values = c.rng.normals(size);
      a = Pair{};  // freed before the next is allocated
      a = c.floats(values);
      neighbours.push_back(c.zeros(n));
      c.cpu.scale(View(a.cpu.get()), -1.5f, n);
      c.gpu.scale(View(a.gpu.get()), -1.5f, n);
      c.expect_close("scale", a, n, 1e-6f);
    }
  });

}

}  // namespace moelens::gpu_check
