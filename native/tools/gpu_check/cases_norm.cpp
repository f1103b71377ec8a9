// moelens-gpu-check: RMSNorm, the residual add fused with it, the gated RMSNorm.
#include "check.h"

namespace moelens::gpu_check {

void add_norm_cases(Cases& all) {
  const CaseAdder add{all};

  add("rms_norm", [](Ctx& c) {
    c.shape = "3x300 + in place 1x300";
    const int rows = 3, dim = 300;
    Pair x = c.floats(c.rng.normals(rows * dim)), w = c.floats(c.rng.normals(dim));
    Pair out = c.zeros(rows * dim);
    for (Backend* b : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
      const bool g = b == &c.gpu;
      b->rms_norm(View(g ? x.gpu.get() : x.cpu.get()), View(g ? w.gpu.get() : w.cpu.get()), rows, dim, 1e-6f,
                  View(g ? out.gpu.get() : out.cpu.get()));
      b->rms_norm(View(g ? x.gpu.get() : x.cpu.get(), dim), View(), 1, dim, 1e-5f, View(g ? x.gpu.get() : x.cpu.get(), dim));
    }
    c.expect_close("rms_norm", out, rows * dim, 1e-5f);
    c.expect_close("rms_norm in place, no weight", x, rows * dim, 1e-5f);
  });

  // Kernels read their weights before they wait for the previous launch (await_inputs): a weight written
  // while earlier work is still recorded is copied in order with it, and that copy fences the next
  // launch (Dispatch::fences_next), which then reads the new weight, not the old one.
  add("rms_norm after its weight is rewritten behind recorded work", [](Ctx& c) {
    c.shape = "2x256: a norm, the weight rewritten, the norm again";
    const int rows = 2, dim = 256;
    Pair x = c.floats(c.rng.normals(rows * dim)), w = c.floats(c.rng.normals(dim)), out = c.zeros(rows * dim);
    Pair first = c.zeros(rows * dim);
    const std::vector<float> w2 = c.rng.normals(dim);
    for (Backend* b : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
      const bool g = b == &c.gpu;
      b->rms_norm(View(g ? x.gpu.get() : x.cpu.get()), View(g ? w.gpu.get() : w.cpu.get()), rows, dim, 1e-6f,
                  View(g ? first.gpu.get() : first.cpu.get()));
      const uint64_t fencing = c.gpu.fencing_dispatches();
      b->write(View(g ? w.gpu.get() : w.cpu.get()), w2.data(), size_t(dim));  // the GPU's work is still recorded
      if (g && c.gpu.fencing_dispatches() != fencing + 1) throw Failure("the staged write did not fence the next launch");
      b->rms_norm(View(g ? x.gpu.get() : x.cpu.get()), View(g ? w.gpu.get() : w.cpu.get()), rows, dim, 1e-6f,
                  View(g ? out.gpu.get() : out.cpu.get()));
    }
    c.expect_close("rms_norm before the write", first, rows * dim, 1e-5f);
    c.expect_close("rms_norm after the write", out, rows * dim, 1e-5f);
    const uint64_t fencing = c.gpu.fencing_dispatches();
    c.gpu.write(View(w.gpu.get()), w2.data(), size_t(dim));  // nothing recorded: written at once
    if (c.gpu.fencing_dispatches() != fencing) throw Failure("a direct write was staged");
  });

  add("residual add + rms_norm", [](Ctx& c) {
    // The session's pattern: add(h, mix) then rms_norm(h): one fused launch on the GPU backend.
    c.shape = "4x200, scale 0.5";
    const int rows = 4, dim = 200;
    Pair h = c.floats(c.rng.normals(rows * dim)), mix = c.floats(c.rng.normals(rows * dim)), w = c.floats(c.rng.normals(dim));
    Pair out = c.zeros(rows * dim);
    for (Backend* b : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
      const bool g = b == &c.gpu;
      b->add(View(g ? h.gpu.get() : h.cpu.get()), View(g ? mix.gpu.get() : mix.cpu.get()), size_t(rows) * dim, 0.5f);
      b->rms_norm(View(g ? h.gpu.get() : h.cpu.get()), View(g ? w.gpu.get() : w.cpu.get()), rows, dim, 1e-6f,
                  View(g ? out.gpu.get() : out.cpu.get()));
    }
    c.expect_close("residual", h, rows * dim, 1e-6f);
    c.expect_close("norm", out, rows * dim, 1e-5f);
  });

  // At fp16 the norm also writes its output's int16 blocks, into a buffer that grows with the rows: a
  // fused add and norm larger than any before must still add once (growing releases the old buffer,
  // and a release dispatches a deferred add).
  add("residual add + rms_norm, int16 blocks", [](Ctx& c) {
    c.shape = "15x4096, scale 0.5, after 1x64";
    for (int rows : {1, 15}) {
      const int dim = rows == 1 ? 64 : 4096;
      Pair h = c.floats(c.rng.normals(size_t(rows) * dim)), mix = c.floats(c.rng.normals(size_t(rows) * dim));
      Pair w = c.floats(c.rng.normals(dim)), out = c.zeros(size_t(rows) * dim);
      for (Backend* b : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
        const bool g = b == &c.gpu;
        b->add(View(g ? h.gpu.get() : h.cpu.get()), View(g ? mix.gpu.get() : mix.cpu.get()), size_t(rows) * dim, 0.5f);
        b->rms_norm(View(g ? h.gpu.get() : h.cpu.get()), View(g ? w.gpu.get() : w.cpu.get()), rows, dim, 1e-6f,
                    View(g ? out.gpu.get() : out.cpu.get()));
      }
      c.expect_close("residual", h, size_t(rows) * dim, 1e-6f);
      c.expect_close("norm", out, size_t(rows) * dim, 1e-5f);
    }
  });

  add("gated_rms_norm", [](Ctx& c) {
    c.shape = "9 rows of 64, in place";
    const int rows = 9, dim = 64;
    Pair x = c.floats(c.rng.normals(rows * dim)), z = c.floats(c.rng.normals(rows * dim)), w = c.floats(c.rng.normals(dim));
    c.cpu.gated_rms_norm(View(x.cpu.get()), View(z.cpu.get()), View(w.cpu.get()), rows, dim, 1e-6f, View(x.cpu.get()));
    c.gpu.gated_rms_norm(View(x.gpu.get()), View(z.gpu.get()), View(w.gpu.get()), rows, dim, 1e-6f, View(x.gpu.get()));
    c.expect_close("gated_rms_norm", x, rows * dim, 1e-5f);
  });

}

}  // namespace moelens::gpu_check
