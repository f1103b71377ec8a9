// moelens-gpu-check: RMSNorm, the residual add fused with it, the norm fused into the projections
// that read it, the gated RMSNorm.
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

  // Decode's RMSNorm folded into the projections that read it (gemv_norm): rms_norm(h -> x) then a
  // matmul or matmul_group of x, against the CPU backend (the projections and x itself, which the launch
  // writes for the kernels after it). Below CHECK_TILED_FROM the fused kernel must run; from it on
  // (n 17, 65) the norm runs on its own before the tiled GEMM (tiled tolerance, cases_matmul.cpp); rows
  // past GEMV_NORM_MAX_COLS, or a norm in place, run unfused at any n. "+ add": a single matrix whose
  // output is then added to the residual stream (the held launch's residual epilogue).
  struct NormedShape {
    int n, cols, jobs;
    bool weight, add = false;
  };
  for (NormedShape m : {NormedShape{1, 2048, 3, true}, NormedShape{3, 256, 4, true}, NormedShape{15, 256, 2, false},
                        NormedShape{1, 256, 1, true, true}, NormedShape{2, 4096, 1, true}, NormedShape{1, 4160, 2, true},
                        NormedShape{17, 256, 3, true}, NormedShape{65, 128, 1, true, true}})
    add("rms_norm + matmul n" + std::to_string(m.n) + " x" + std::to_string(m.cols) + " " + std::to_string(m.jobs) +
            (m.jobs == 1 ? " matrix" : " matrices") + (m.weight ? "" : ", no norm weight") + (m.add ? " + add" : ""),
        [m](Ctx& c) {
          c.shape = std::to_string(m.n) + " tokens x " + std::to_string(m.cols) + ", " + std::to_string(m.jobs) +
                    " matrices (q4, q8, bf16, f32) of 37, 16, 1, 9 rows";
          const char* fmts[] = {"q4", "q8", "bf16", "f32"};
          const int rows[] = {37, 16, 1, 9};
          std::vector<HostWeight> hw;
          for (int j = 0; j < m.jobs; ++j) hw.emplace_back(c.rng, fmts[j], rows[j], m.cols);
          std::vector<WeightPair> w;
          std::vector<Pair> outs;
          for (int j = 0; j < m.jobs; ++j)
            w.push_back(upload(c, hw[size_t(j)])), outs.push_back(c.zeros(size_t(m.n) * size_t(rows[j])));
          const size_t count = size_t(m.n) * size_t(m.cols);
          Pair h = c.floats(c.rng.normals(count, 3.0f)), nw = c.floats(c.rng.normals(size_t(m.cols)));
          Pair x = c.zeros(count), resid = c.floats(c.rng.normals(size_t(m.n) * size_t(rows[0])));
          const uint64_t fused = c.launches(gpu::kernels::gemv_norm::id), adds = c.launches(gpu::kernels::add_scaled::id);
          for (Backend* b : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
            const bool g = b == &c.gpu;
            auto at = [g](const Pair& p) { return View(g ? p.gpu.get() : p.cpu.get()); };
            std::vector<Backend::MatmulJob> jobs;
            for (int j = 0; j < m.jobs; ++j) jobs.push_back({g ? w[size_t(j)].gpu.get() : w[size_t(j)].cpu.get(), at(outs[size_t(j)])});
            b->rms_norm(at(h), m.weight ? at(nw) : View(), m.n, m.cols, 1e-6f, at(x));
            if (m.jobs == 1) b->matmul(*jobs[0].weight, at(x), m.n, jobs[0].out);
            else b->matmul_group(jobs, at(x), m.n);
            if (m.add) b->add(at(resid), jobs[0].out, size_t(m.n) * size_t(rows[0]), 0.5f);
          }
          const bool tiled = m.n >= CHECK_TILED_FROM, foldable = !tiled && size_t(m.cols) <= GEMV_NORM_MAX_COLS;
          const float tol = tiled ? 3e-3f : 2e-5f;  // the tiled GEMM's tolerance (cases_matmul.cpp)
          c.expect_close("rms_norm out", x, count, 1e-5f);
          for (int j = 0; j < m.jobs; ++j) c.expect_close("matmul", outs[size_t(j)], size_t(m.n) * size_t(rows[j]), tol);
          if (m.add) c.expect_close("residual", resid, size_t(m.n) * size_t(rows[0]), tol);
          // Counted after the reads, which dispatch what the backend still held back.
          if (c.launches(gpu::kernels::gemv_norm::id) != fused + (foldable ? 1 : 0))
            throw Failure(std::string("the norm ") + (foldable ? "did not run" : "ran") + " inside the projection");
          if (m.add && !tiled && c.launches(gpu::kernels::add_scaled::id) != adds)
            throw Failure("the residual add did not run inside the projection");
        });

  // DeltaNet's gated norm folded into the output projection (gemv_norm, gated): gated_rms_norm(core, z
  // -> head_out) over value heads of `dim`, then matmul of head_out, against the CPU backend (the
  // projection and head_out). Below CHECK_TILED_FROM the fused kernel must run; n 17 runs them apart.
  struct GatedShape {
    int n, heads, dim;
    bool add;
  };
  for (GatedShape m : {GatedShape{1, 32, 128, false}, GatedShape{3, 4, 64, true}, GatedShape{2, 3, 96, false},
                       GatedShape{17, 2, 64, false}})
    add("gated_rms_norm + matmul n" + std::to_string(m.n) + " " + std::to_string(m.heads) + "x" + std::to_string(m.dim) +
            (m.add ? " + add" : ""),
        [m](Ctx& c) {
          const int cols = m.heads * m.dim, rows = 37;
          const size_t count = size_t(m.n) * size_t(cols);
          c.shape = std::to_string(m.n) + " tokens x " + std::to_string(m.heads) + " heads of " + std::to_string(m.dim) +
                    ", q4 " + std::to_string(rows) + " rows";
          HostWeight hw(c.rng, "q4", rows, cols, 0, 32);
          WeightPair w = upload(c, hw);
          Pair core = c.floats(c.rng.normals(count, 2.0f)), z = c.floats(c.rng.normals(count)), nw = c.floats(c.rng.normals(size_t(m.dim)));
          Pair head_out = c.zeros(count), out = c.zeros(size_t(m.n) * rows), resid = c.floats(c.rng.normals(size_t(m.n) * rows));
          const uint64_t fused = c.launches(gpu::kernels::gemv_norm::id);
          for (Backend* b : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
            const bool g = b == &c.gpu;
            auto at = [g](const Pair& p) { return View(g ? p.gpu.get() : p.cpu.get()); };
            b->gated_rms_norm(at(core), at(z), at(nw), m.n * m.heads, m.dim, 1e-6f, at(head_out));
            b->matmul(g ? *w.gpu : *w.cpu, at(head_out), m.n, at(out));
            if (m.add) b->add(at(resid), at(out), size_t(m.n) * rows, 1.0f);
          }
          const bool tiled = m.n >= CHECK_TILED_FROM;
          const float tol = tiled ? 3e-3f : 2e-5f;  // the tiled GEMM's tolerance (cases_matmul.cpp)
          c.expect_close("gated_rms_norm out", head_out, count, 1e-5f);
          c.expect_close("matmul", out, size_t(m.n) * rows, tol);
          if (m.add) c.expect_close("residual", resid, size_t(m.n) * rows, tol);
          if (c.launches(gpu::kernels::gemv_norm::id) != fused + (tiled ? 0 : 1))
            throw Failure(std::string("the gated norm ") + (tiled ? "ran" : "did not run") + " inside the projection");
        });

  // The norm in place runs on its own (the projection would read x while block 0 writes it).
  add("rms_norm in place + matmul", [](Ctx& c) {
    c.shape = "1 token x 256, in place, q4 37 rows";
    HostWeight hw(c.rng, "q4", 37, 256);
    WeightPair w = upload(c, hw);
    Pair h = c.floats(c.rng.normals(256)), nw = c.floats(c.rng.normals(256)), out = c.zeros(37);
    const uint64_t fused = c.launches(gpu::kernels::gemv_norm::id);
    c.cpu.rms_norm(View(h.cpu.get()), View(nw.cpu.get()), 1, 256, 1e-6f, View(h.cpu.get()));
    c.cpu.matmul(*w.cpu, View(h.cpu.get()), 1, View(out.cpu.get()));
    c.gpu.rms_norm(View(h.gpu.get()), View(nw.gpu.get()), 1, 256, 1e-6f, View(h.gpu.get()));
    c.gpu.matmul(*w.gpu, View(h.gpu.get()), 1, View(out.gpu.get()));
    c.expect_close("rms_norm", h, 256, 1e-5f);
    c.expect_close("matmul", out, 37, 2e-5f);
    if (c.launches(gpu::kernels::gemv_norm::id) != fused) throw Failure("a norm in place ran inside the projection");
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
