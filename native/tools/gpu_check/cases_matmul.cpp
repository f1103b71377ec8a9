// moelens-gpu-check: matmul and fused groups, every weight format.
#include "check.h"

namespace moelens::gpu_check {

void add_matmul_cases(Cases& all) {
  const CaseAdder add{all};

  // Wide rows: the launch splits each block of rows over several simdgroups (split-K).
  struct MatmulShape {
    std::string fmt;
    int group;
    DType scale;
    int n;
    size_t x_offset;  // 1: activations not 16-byte aligned (scalar loads)
    int cols = 256;
  };
  for (MatmulShape m : {MatmulShape{"q4", 64, DType::BF16, 1, 0}, MatmulShape{"q4", 32, DType::F16, 3, 0},
                        MatmulShape{"q4", 128, DType::F32, 2, 1}, MatmulShape{"q8", 64, DType::BF16, 1, 1},
                        MatmulShape{"q8", 32, DType::BF16, 2, 0}, MatmulShape{"bf16", 0, DType::BF16, 2, 1},
                        MatmulShape{"f16", 0, DType::BF16, 1, 0}, MatmulShape{"f32", 0, DType::BF16, 3, 1},
                        MatmulShape{"f32", 0, DType::BF16, 1, 0}, MatmulShape{"q4", 64, DType::BF16, 1, 0, 4096},
                        MatmulShape{"q4", 64, DType::BF16, 3, 1, 2048}, MatmulShape{"q8", 64, DType::BF16, 2, 0, 2048},
                        MatmulShape{"bf16", 0, DType::BF16, 1, 1, 2048}})
    add("matmul " + m.fmt + (m.group ? " g" + std::to_string(m.group) : "") + " n" + std::to_string(m.n) +
            (m.x_offset ? " unaligned" : "") + (m.cols != 256 ? " x" + std::to_string(m.cols) : ""),
        [m](Ctx& c) {
          const int rows = 37, cols = m.cols;
          c.shape = "37x" + std::to_string(cols) + (m.x_offset ? ", x at an odd offset" : "");
          HostWeight h(c.rng, m.fmt, rows, cols, 0, m.group ? m.group : 64, m.scale);
          WeightPair w = upload(c, h);
          Pair x = c.floats(c.rng.normals(m.x_offset + size_t(m.n) * cols)), out = c.zeros(size_t(m.n) * rows);
          c.cpu.matmul(*w.cpu, View(x.cpu.get(), m.x_offset), m.n, View(out.cpu.get()));
          c.gpu.matmul(*w.gpu, View(x.gpu.get(), m.x_offset), m.n, View(out.gpu.get()));
          c.expect_close("matmul", out, size_t(m.n) * rows, 2e-5f);
        });

  for (int cols : {128, 4096})
    add("matmul_group x" + std::to_string(cols), [cols](Ctx& c) {
      c.shape = "5 matrices (q4, q8, bf16) x " + std::to_string(cols);
      std::vector<HostWeight> hw;
      const char* fmts[] = {"q4", "q8", "q4", "q8", "bf16"};
      const int rows[] = {40, 16, 33, 1, 9};
      for (int j = 0; j < 5; ++j) hw.emplace_back(c.rng, fmts[j], rows[j], cols);
      std::vector<WeightPair> w;
      std::vector<Pair> outs;
      for (int j = 0; j < 5; ++j) w.push_back(upload(c, hw[size_t(j)])), outs.push_back(c.zeros(size_t(rows[j])));
      Pair x = c.floats(c.rng.normals(cols));
      std::vector<Backend::MatmulJob> jc, jg;
      for (int j = 0; j < 5; ++j) {
        jc.push_back({w[size_t(j)].cpu.get(), View(outs[size_t(j)].cpu.get())});
        jg.push_back({w[size_t(j)].gpu.get(), View(outs[size_t(j)].gpu.get())});
      }
      c.cpu.matmul_group(jc, View(x.cpu.get()), 1);
      c.gpu.matmul_group(jg, View(x.gpu.get()), 1);
      for (int j = 0; j < 5; ++j) c.expect_close("matmul_group", outs[size_t(j)], size_t(rows[j]), 2e-5f);
    });

}

}  // namespace moelens::gpu_check
