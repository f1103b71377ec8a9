// moelens-gpu-check: matmul and fused groups, every weight format, as GEMVs (decode) and as tiled GEMMs
// (chunks of at least CHECK_TILED_FROM tokens).
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
          ExactGpu exact(c.gpu);
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
      ExactGpu exact(c.gpu);
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

  // The fp16 precision's integer GEMV (calls below the tiled threshold, 4-bit weights with bf16 scales):
  // quantize_int16 then gemv_int16, against the CPU at its int16 precision, which rounds the activations
  // the same way, so that only the order of the fp32 sums differs (the exact GEMV's tolerance; a wrong
  // column order or block scale is off by O(1)). Ragged row blocks, split-K (wide rows), several tokens,
  // x at an odd offset, groups of 32 and 128, and one block of 32 columns.
  struct Int16Shape {
    int group, n, rows, cols;
    size_t x_offset = 0;
  };
  for (Int16Shape m : {Int16Shape{64, 1, 37, 256}, Int16Shape{64, 3, 37, 2048, 1}, Int16Shape{32, 2, 9, 4096},
                       Int16Shape{128, 1, 70, 512}, Int16Shape{64, 15, 5, 64, 1}, Int16Shape{32, 1, 3, 32}})
    add("matmul int16 g" + std::to_string(m.group) + " n" + std::to_string(m.n) + " " + std::to_string(m.rows) + "x" +
            std::to_string(m.cols) + (m.x_offset ? " unaligned" : ""),
        [m](Ctx& c) {
          c.shape = std::to_string(m.rows) + "x" + std::to_string(m.cols) + ", " + std::to_string(m.n) + " tokens";
          HostWeight h(c.rng, "q4", m.rows, m.cols, 0, m.group, DType::BF16);
          WeightPair w = upload(c, h);
          // Blocks of very different scales, and an all-zero block (d = 0).
          std::vector<float> xv = c.rng.normals(m.x_offset + size_t(m.n) * m.cols);
          for (size_t i = m.x_offset; i < xv.size(); ++i) xv[i] *= i / 32 % 3 == 1 ? 40.0f : 1.0f;
          if (m.cols > 32) std::fill(xv.begin() + ptrdiff_t(m.x_offset) + 32, xv.begin() + ptrdiff_t(m.x_offset) + 64, 0.0f);
          Pair x = c.floats(xv), out = c.zeros(size_t(m.n) * m.rows);
          {
            Int16Cpu int16(c.cpu);
            c.cpu.matmul(*w.cpu, View(x.cpu.get(), m.x_offset), m.n, View(out.cpu.get()));
          }
          const uint64_t before = c.launches(gpu::kernels::gemv_int16::id);
          c.gpu.matmul(*w.gpu, View(x.gpu.get(), m.x_offset), m.n, View(out.gpu.get()));
          if (c.launches(gpu::kernels::gemv_int16::id) != before + 1) throw Failure("the call did not run gemv_int16");
          c.expect_close("matmul int16", out, size_t(m.n) * m.rows, 2e-5f);
        });

  // A norm's output read by the next matmul: the norm kernels store its int16 blocks beside it (rms_norm,
  // the add fused into add_rms_norm, gated_rms_norm over heads of 64), which gemv_int16 reads without a
  // quantize_int16 launch; after the output is written again (scaled, here), the blocks are stale and
  // the matmul quantises anew.
  for (std::string norm : {"rms_norm", "add_rms_norm", "gated_rms_norm"})
    add("matmul int16 after " + norm, [norm](Ctx& c) {
      const int n = 2, cols = 256, rows = 40, head = 64;
      c.shape = std::to_string(rows) + "x" + std::to_string(cols) + " after " + norm + ", " + std::to_string(n) + " tokens";
      HostWeight h(c.rng, "q4", rows, cols);
      WeightPair w = upload(c, h);
      const size_t count = size_t(n) * cols;
      Pair x = c.floats(c.rng.normals(count)), a = c.floats(c.rng.normals(count)), z = c.floats(c.rng.normals(count));
      Pair gain = c.floats(c.rng.normals(norm == "gated_rms_norm" ? head : cols)), normed = c.zeros(count);
      Pair out = c.zeros(size_t(n) * rows);
      auto run = [&](Backend& be, auto pick) {
        if (norm == "gated_rms_norm") {
          be.gated_rms_norm(View(pick(x)), View(pick(z)), View(pick(gain)), n * cols / head, head, 1e-6f, View(pick(normed)));
        } else {
          if (norm == "add_rms_norm") be.add(View(pick(x)), View(pick(a)), count, 0.5f);
          be.rms_norm(View(pick(x)), View(pick(gain)), n, cols, 1e-6f, View(pick(normed)));
        }
      };
      auto cpu = [](const Pair& p) { return p.cpu.get(); };
      auto gpu = [](const Pair& p) { return p.gpu.get(); };
      run(c.cpu, cpu);
      run(c.gpu, gpu);
      {
        Int16Cpu int16(c.cpu);
        c.cpu.matmul(*w.cpu, View(normed.cpu.get()), n, View(out.cpu.get()));
      }
      const uint64_t quantized = c.launches(gpu::kernels::quantize_int16::id), products = c.launches(gpu::kernels::gemv_int16::id);
      c.gpu.matmul(*w.gpu, View(normed.gpu.get()), n, View(out.gpu.get()));
      if (c.launches(gpu::kernels::quantize_int16::id) != quantized || c.launches(gpu::kernels::gemv_int16::id) != products + 1)
        throw Failure("the matmul after " + norm + " did not read the norm's int16 blocks");
      c.expect_close("matmul int16 after the norm", out, size_t(n) * rows, 2e-5f);
      c.cpu.scale(View(normed.cpu.get()), 3.0f, count);
      c.gpu.scale(View(normed.gpu.get()), 3.0f, count);
      {
        Int16Cpu int16(c.cpu);
        c.cpu.matmul(*w.cpu, View(normed.cpu.get()), n, View(out.cpu.get()));
      }
      c.gpu.matmul(*w.gpu, View(normed.gpu.get()), n, View(out.gpu.get()));
      if (c.launches(gpu::kernels::quantize_int16::id) != quantized + 1)
        throw Failure("the matmul after the norm's output was scaled did not quantise it anew");
      c.expect_close("matmul int16 after a write", out, size_t(n) * rows, 2e-5f);
    });

  // The fp16 precision's exact GEMV of 4-bit matrices on the matrix units (gemv_exact_q4: the lm_head of
  // a decode step), against the CPU's fp32 at the exact GEMV's tolerance: x's pieces reproduce it to far
  // below fp32's rounding, so only the order of the fp32 sums differs (a piece's scale or the column order
  // wrong fails 12 cases). A chunk and a ragged one (1088 columns), the last threadgroup's rows partly past
  // the matrix (136 = 2 x 64 + 8), several tokens, x over 2^-40 .. 2^12 within a group (small values next
  // to large ones), a zero group, x at an odd offset.
  struct MatrixUnitShape {
    int rows, cols, n;
    bool wide_range;
    size_t x_offset = 0;
  };
  for (MatrixUnitShape e : {MatrixUnitShape{8, 64, 1, false}, MatrixUnitShape{40, 1088, 3, false},
                            MatrixUnitShape{136, 2048, 2, true}, MatrixUnitShape{64, 1024, 1, true, 1}})
    add("matmul exact on the matrix units " + std::to_string(e.rows) + "x" + std::to_string(e.cols) + " n" +
            std::to_string(e.n) + (e.wide_range ? " wide range" : "") + (e.x_offset ? " unaligned" : ""),
        [e](Ctx& c) {
          c.shape = std::to_string(e.rows) + "x" + std::to_string(e.cols) + ", " + std::to_string(e.n) + " tokens" +
                    (e.wide_range ? ", x over 2^-40 .. 2^12 and a zero group" : "") + (e.x_offset ? ", x at an odd offset" : "");
          HostWeight h(c.rng, "q4", e.rows, e.cols, 0, 64, DType::BF16);
          WeightPair w = upload(c, h);
          std::vector<float> xv = c.rng.normals(e.x_offset + size_t(e.n) * e.cols);
          if (e.wide_range)
            for (size_t i = 0; i < xv.size(); ++i) xv[i] = i % size_t(e.cols) < 64 ? 0.0f : xv[i] * std::ldexp(1.0f, int(i % 53) - 40);
          Pair x = c.floats(xv), out = c.zeros(size_t(e.n) * e.rows);
          const uint64_t before = c.launches(gpu::kernels::gemv_exact_q4::id);
          c.cpu.matmul_group({{w.cpu.get(), View(out.cpu.get()), true}}, View(x.cpu.get(), e.x_offset), e.n);
          c.gpu.matmul_group({{w.gpu.get(), View(out.gpu.get()), true}}, View(x.gpu.get(), e.x_offset), e.n);
          if (c.launches(gpu::kernels::gemv_exact_q4::id) != before + 1) throw Failure("expected one gemv_exact_q4 launch");
          c.expect_close("exact matmul", out, size_t(e.n) * e.rows, 2e-5f);
        });

  // A group that mixes what gemv_int16 takes (4-bit, bf16 scales) with what it leaves (an exact 4-bit job,
  // 8-bit, f16 scales, bf16 rows) on the fp32 GEMV; more 4-bit jobs than one launch binds (5: 4, then 1),
  // all from one quantisation of x.
  add("matmul_group int16 and fp32", [](Ctx& c) {
    const int cols = 512;
    c.shape = "5 int16 (q4) and 4 fp32 matrices x 512";
    struct Job {
      const char* fmt;
      int rows;
      DType scale;
      bool exact, int16;
    };
    const Job jobs[] = {{"q4", 40, DType::BF16, false, true},  {"q8", 16, DType::BF16, false, false},
                        {"q4", 33, DType::BF16, false, true},  {"q4", 8, DType::BF16, true, false},
                        {"q4", 9, DType::F16, false, false},   {"q4", 5, DType::BF16, false, true},
                        {"bf16", 7, DType::BF16, false, false}, {"q4", 64, DType::BF16, false, true},
                        {"q4", 6, DType::BF16, false, true}};
    std::vector<HostWeight> hw;  // the CPU's weights read these
    std::vector<WeightPair> w;
    std::vector<Pair> outs;
    for (const Job& j : jobs) hw.emplace_back(c.rng, j.fmt, j.rows, cols, 0, 64, j.scale);
    for (size_t i = 0; i < std::size(jobs); ++i) w.push_back(upload(c, hw[i])), outs.push_back(c.zeros(size_t(jobs[i].rows)));
    Pair x = c.floats(c.rng.normals(cols));
    std::vector<Backend::MatmulJob> jc32, jc16, jg;
    for (size_t i = 0; i < std::size(jobs); ++i) {
      (jobs[i].int16 ? jc16 : jc32).push_back({w[i].cpu.get(), View(outs[i].cpu.get()), jobs[i].exact});
      jg.push_back({w[i].gpu.get(), View(outs[i].gpu.get()), jobs[i].exact});
    }
    c.cpu.matmul_group(jc32, View(x.cpu.get()), 1);
    {
      Int16Cpu int16(c.cpu);
      c.cpu.matmul_group(jc16, View(x.cpu.get()), 1);
    }
    const uint64_t q_before = c.launches(gpu::kernels::quantize_int16::id), before = c.launches(gpu::kernels::gemv_int16::id);
    c.gpu.matmul_group(jg, View(x.gpu.get()), 1);
    if (c.launches(gpu::kernels::quantize_int16::id) != q_before + 1 || c.launches(gpu::kernels::gemv_int16::id) != before + 2)
      throw Failure("the 4-bit jobs did not run as one quantisation and two gemv_int16 launches");
    for (size_t i = 0; i < std::size(jobs); ++i) c.expect_close(jobs[i].int16 ? "int16 job" : "fp32 job", outs[i], size_t(jobs[i].rows), 2e-5f);
  });

  // The tiled GEMM (fp16 operands, fp32 accumulation). Tolerance: each operand is rounded to half
  // (unit roundoff 2^-11), so a dot product of random terms is off by a few 1e-4 of the output's
  // scale (measured: at most 7.8e-4 over these and the MoE cases, seeds 1-3, every order); 3e-3
  // leaves room for other seeds, stays under the 1e-2 accuracy target, and a tile or layout mistake
  // is off by O(1) (a wrong transpose fails 18 cases).
  const float tiled_tol = 3e-3f;
  struct TiledShape {
    std::string fmt;
    int group;
    DType scale;
    int n, rows, cols;
    size_t x_offset = 0;
  };
  const int wide = int(GEMM_WIDE_MIN_TOKENS);  // chunks from here on run gemm_wide
  for (TiledShape m : {TiledShape{"q4", 64, DType::BF16, 65, 37, 256}, TiledShape{"q4", 32, DType::F16, 16, 70, 128},
                       TiledShape{"q4", 128, DType::F32, 20, 64, 256, 1}, TiledShape{"q8", 64, DType::BF16, 65, 37, 128},
                       TiledShape{"q8", 32, DType::F16, 16, 9, 96, 1}, TiledShape{"q8", 128, DType::F32, 17, 40, 128},
                       TiledShape{"bf16", 0, DType::BF16, 65, 37, 72, 1}, TiledShape{"f16", 0, DType::BF16, 16, 65, 40},
                       TiledShape{"f32", 0, DType::BF16, 33, 37, 100}, TiledShape{"q4", 32, DType::BF16, 200, 70, 96},
                       TiledShape{"q8", 64, DType::F16, wide + 76, 24, 64}, TiledShape{"q4", 64, DType::BF16, 200, 33, 64, 1},
                       TiledShape{"q4", 32, DType::BF16, wide + 88, 150, 96, 1}, TiledShape{"bf16", 0, DType::BF16, wide + 8, 37, 72},
                       TiledShape{"q4", 32, DType::BF16, 600, 150, 96, 1},
                       // 4-bit in groups of 64, rows a multiple of 8: gemm_q4 (a ragged second row tile of
                       // 128, 9 groups: two rounds of staged scales, in parts on gemm_q4_parts, the second
                       // part one K-step; 17 groups: three rounds, the first part two of them; two rounds on
                       // gemm_q4 itself, in a launch of too many threadgroups to split; one 8-row block),
                       // gemm for f32 scales that half cannot hold, and gemm_q4 for a chunk that would
                       // otherwise take gemm_wide.
                       TiledShape{"q4", 64, DType::BF16, 65, 136, 576, 1}, TiledShape{"q4", 64, DType::BF16, 40, 24, 1088},
                       TiledShape{"q4", 64, DType::BF16, int(Q4_PARTS_TARGET_THREADGROUPS / 2 + 1) * 64, 8, 576},
                       TiledShape{"q4", 64, DType::F16, 16, 8, 64},
                       TiledShape{"q4", 64, DType::F32, 200, 40, 128}, TiledShape{"q4", 64, DType::BF16, wide + 40, 24, 64}})
    add("matmul tiled " + m.fmt + (m.group ? " g" + std::to_string(m.group) : "") + " n" + std::to_string(m.n) +
            (m.x_offset ? " unaligned" : ""),
        [m, tiled_tol](Ctx& c) {
          c.shape = std::to_string(m.rows) + "x" + std::to_string(m.cols) + ", " + std::to_string(m.n) + " tokens";
          HostWeight h(c.rng, m.fmt, m.rows, m.cols, 0, m.group ? m.group : 64, m.scale);
          WeightPair w = upload(c, h);
          Pair x = c.floats(c.rng.normals(m.x_offset + size_t(m.n) * m.cols)), out = c.zeros(size_t(m.n) * m.rows);
          // 4-bit rows in groups of 64 on gemm_q4 when their scales and biases are exact in half (the f32
          // ones drawn here never are: that case checks the fallback); otherwise chunks of
          // GEMM_WIDE_MIN_TOKENS and more on the larger tiles.
          const bool q4 = m.fmt == "q4" && m.group == 64 && m.rows % 8 == 0 && m.cols % 64 == 0 && m.scale != DType::F32;
          const bool wide = !q4 && m.n >= int(GEMM_WIDE_MIN_TOKENS);
          // gemm_q4 launches of at most half Q4_PARTS_TARGET_THREADGROUPS threadgroups take their columns in
          // parts (gemm_q4_parts) when they hold two stagings of scales or more.
          const bool parts = q4 && m.cols > int(Q4_SCALE_GROUPS * GEMM_K) &&
                             size_t((m.rows + Q4_TILE_ROWS - 1) / Q4_TILE_ROWS) * ((m.n + GEMM_TILE_TOKENS - 1) / GEMM_TILE_TOKENS) * 2 <=
                                 Q4_PARTS_TARGET_THREADGROUPS;
          const auto kernel = wide    ? gpu::kernels::gemm_wide::id
                              : parts ? gpu::kernels::gemm_q4_parts::id
                              : q4    ? gpu::kernels::gemm_q4::id
                                      : gpu::kernels::gemm::id;
          const uint64_t before = c.launches(kernel), rounded_before = c.launches(gpu::kernels::half_rows::id);
          c.cpu.matmul(*w.cpu, View(x.cpu.get(), m.x_offset), m.n, View(out.cpu.get()));
          c.gpu.matmul(*w.gpu, View(x.gpu.get(), m.x_offset), m.n, View(out.gpu.get()));
          if (c.launches(kernel) != before + 1 || c.launches(gpu::kernels::half_rows::id) != rounded_before + 1)
            throw Failure("a chunk of " + std::to_string(m.n) + " tokens did not run half_rows then " +
                          (wide ? "gemm_wide" : parts ? "gemm_q4_parts" : q4 ? "gemm_q4" : "gemm"));
          c.expect_close("matmul tiled", out, size_t(m.n) * m.rows, tiled_tol);
        });

  // Both sides of CHECK_TILED_FROM through one entry point: decode sizes stay on the exact GEMV.
  for (int n : {1, CHECK_TILED_FROM - 1, CHECK_TILED_FROM})
    add("matmul tiled threshold n" + std::to_string(n), [n, tiled_tol](Ctx& c) {
      c.shape = "24x64, " + std::to_string(n) + " tokens";
      HostWeight h(c.rng, "q4", 24, 64);
      WeightPair w = upload(c, h);
      Pair x = c.floats(c.rng.normals(size_t(n) * 64)), out = c.zeros(size_t(n) * 24);
      auto tiled_launches = [&c] { return c.launches(gpu::kernels::gemm::id) + c.launches(gpu::kernels::gemm_q4::id); };
      const uint64_t before = tiled_launches();
      {  // below the threshold, the integer GEMV: its reference is the CPU's int16 precision
        std::unique_ptr<Int16Cpu> int16 = n < CHECK_TILED_FROM ? std::make_unique<Int16Cpu>(c.cpu) : nullptr;
        c.cpu.matmul(*w.cpu, View(x.cpu.get()), n, View(out.cpu.get()));
      }
      c.gpu.matmul(*w.gpu, View(x.gpu.get()), n, View(out.gpu.get()));
      const bool tiled = tiled_launches() > before;
      if (tiled != (n >= CHECK_TILED_FROM))
        throw Failure(std::to_string(n) + " tokens ran the " + (tiled ? "tiled" : "GEMV") + " kernel");
      c.expect_close("matmul", out, size_t(n) * 24, tiled ? tiled_tol : 2e-5f);
    });

  // Exact jobs of a tiled chunk (MatmulJob::exact: the router and the shared-expert gate) on the fp32
  // GEMM, next to fp16 jobs of the same group. Tolerance: fp32 products summed in a different order
  // than the CPU's (measured at most 1.6e-6 of the output's scale over these cases, seeds 1-3, every
  // order); 1e-5 is the fp32 contract of the router, and an fp16 operand alone is off by ~1e-4.
  const float exact_tol = 1e-5f;
  struct ExactShape {
    std::string fmt;
    int group;
    DType scale;
    int n, rows, cols;
    size_t x_offset = 0;
  };
  for (ExactShape m : {ExactShape{"q8", 64, DType::BF16, 16, 256, 2048}, ExactShape{"q8", 64, DType::BF16, 65, 256, 512, 1},
                       ExactShape{"q8", 64, DType::F16, 200, 70, 256}, ExactShape{"q4", 32, DType::F32, 17, 37, 96, 1},
                       ExactShape{"bf16", 0, DType::BF16, 33, 65, 72}, ExactShape{"f16", 0, DType::BF16, 16, 9, 40, 1},
                       ExactShape{"f32", 0, DType::BF16, 20, 64, 100}})
    add("matmul_group exact " + m.fmt + (m.group ? " g" + std::to_string(m.group) : "") + " n" + std::to_string(m.n) +
            " " + std::to_string(m.rows) + "x" + std::to_string(m.cols) + (m.x_offset ? " unaligned" : ""),
        [m, exact_tol, tiled_tol](Ctx& c) {
          c.shape = std::to_string(m.rows) + "x" + std::to_string(m.cols) + " and a gate row (exact) + 24 rows (fp16), " +
                    std::to_string(m.n) + " tokens";
          HostWeight h(c.rng, m.fmt, m.rows, m.cols, 0, m.group ? m.group : 64, m.scale);
          HostWeight gate(c.rng, m.fmt, 1, m.cols, 0, m.group ? m.group : 64, m.scale);
          HostWeight other(c.rng, "f32", 24, m.cols);
          WeightPair w = upload(c, h), g = upload(c, gate), o = upload(c, other);
          Pair x = c.floats(c.rng.normals(m.x_offset + size_t(m.n) * m.cols));
          Pair out = c.zeros(size_t(m.n) * m.rows), gout = c.zeros(size_t(m.n)), oout = c.zeros(size_t(m.n) * 24);
          std::vector<Backend::MatmulJob> jc{{w.cpu.get(), View(out.cpu.get()), true}, {g.cpu.get(), View(gout.cpu.get()), true},
                                             {o.cpu.get(), View(oout.cpu.get())}};
          std::vector<Backend::MatmulJob> jg{{w.gpu.get(), View(out.gpu.get()), true}, {g.gpu.get(), View(gout.gpu.get()), true},
                                             {o.gpu.get(), View(oout.gpu.get())}};
          const uint64_t exact_before = c.launches(gpu::kernels::gemm_exact::id), gemv_before = c.launches(gpu::kernels::gemv::id);
          c.cpu.matmul_group(jc, View(x.cpu.get(), m.x_offset), m.n);
          c.gpu.matmul_group(jg, View(x.gpu.get(), m.x_offset), m.n);
          if (c.launches(gpu::kernels::gemm_exact::id) != exact_before + 1 || c.launches(gpu::kernels::gemv::id) != gemv_before)
            throw Failure("the exact jobs of a chunk of " + std::to_string(m.n) + " tokens did not run as one exact GEMM");
          c.expect_close("exact", out, size_t(m.n) * m.rows, exact_tol);
          c.expect_close("exact gate", gout, size_t(m.n), exact_tol);
          c.expect_close("fp16 job", oout, size_t(m.n) * 24, tiled_tol);
        });

  // Exact jobs on both sides of CHECK_TILED_FROM, and more of them than one launch takes (5: 4, then 1).
  for (int n : {1, CHECK_TILED_FROM - 1, CHECK_TILED_FROM, 65})
    add("matmul_group exact threshold n" + std::to_string(n), [n, exact_tol](Ctx& c) {
      const int cols = 64;
      c.shape = "5 exact matrices (q4, q8, bf16, f16, f32) x 64, " + std::to_string(n) + " tokens";
      const char* fmts[] = {"q4", "q8", "bf16", "f16", "f32"};
      const int rows[] = {70, 16, 33, 1, 9};
      std::vector<HostWeight> hw;
      for (int j = 0; j < 5; ++j) hw.emplace_back(c.rng, fmts[j], rows[j], cols);
      std::vector<WeightPair> w;
      std::vector<Pair> outs;
      for (int j = 0; j < 5; ++j) w.push_back(upload(c, hw[size_t(j)])), outs.push_back(c.zeros(size_t(n) * rows[j]));
      Pair x = c.floats(c.rng.normals(size_t(n) * cols));
      std::vector<Backend::MatmulJob> jc, jg;
      for (int j = 0; j < 5; ++j) {
        jc.push_back({w[size_t(j)].cpu.get(), View(outs[size_t(j)].cpu.get()), true});
        jg.push_back({w[size_t(j)].gpu.get(), View(outs[size_t(j)].gpu.get()), true});
      }
      const uint64_t before = c.launches(gpu::kernels::gemm_exact::id);
      c.cpu.matmul_group(jc, View(x.cpu.get()), n);
      c.gpu.matmul_group(jg, View(x.gpu.get()), n);
      const uint64_t launched = c.launches(gpu::kernels::gemm_exact::id) - before;
      if (launched != (n >= CHECK_TILED_FROM ? 2u : 0u))
        throw Failure(std::to_string(n) + " tokens ran " + std::to_string(launched) + " exact GEMM launches");
      for (int j = 0; j < 5; ++j) c.expect_close("matmul_group exact", outs[size_t(j)], size_t(n) * rows[j], exact_tol);
    });

  // A single exact row stays on the GEMV even where a single token is a tiled chunk (the threshold at 1
  // token, as the prefill benchmark sets it): a prompt's last logits.
  add("matmul_group exact single row, tiled from 1 token", [exact_tol](Ctx& c) {
    const int rows = 300, cols = 128;
    c.shape = "300x128 (q4), 1 token";
    HostWeight hw(c.rng, "q4", rows, cols);
    WeightPair w = upload(c, hw);
    Pair x = c.floats(c.rng.normals(cols)), out = c.zeros(rows);
    struct TiledFromOne {  // the other cases' threshold back, however this one ends
      gpu::GpuBackend& gpu;
      explicit TiledFromOne(gpu::GpuBackend& g) : gpu(g) { gpu.set_prefill_min_tokens(1); }
      ~TiledFromOne() { gpu.set_prefill_min_tokens(CHECK_TILED_FROM); }
    } tiled_from_one(c.gpu);
    const uint64_t exact_before = c.launches(gpu::kernels::gemm_exact::id), gemv_before = c.launches(gpu::kernels::gemv::id);
    c.cpu.matmul_group({{w.cpu.get(), View(out.cpu.get()), true}}, View(x.cpu.get()), 1);
    c.gpu.matmul_group({{w.gpu.get(), View(out.gpu.get()), true}}, View(x.gpu.get()), 1);
    if (c.launches(gpu::kernels::gemm_exact::id) != exact_before || c.launches(gpu::kernels::gemv::id) != gemv_before + 1)
      throw Failure("a single exact row did not run on the GEMV");
    c.expect_close("matmul_group exact single row", out, size_t(rows), exact_tol);
  });

  // Fused jobs in one launch (4, then 1), every format, rows ragged against the tile.
  add("matmul_group tiled", [tiled_tol](Ctx& c) {
    const int n = 65, cols = 64;
    c.shape = "5 matrices (q4, q8, bf16, f16, f32) x 64, 65 tokens";
    const char* fmts[] = {"q4", "q8", "bf16", "f16", "f32"};
    const int rows[] = {70, 16, 33, 1, 9};
    std::vector<HostWeight> hw;
    for (int j = 0; j < 5; ++j) hw.emplace_back(c.rng, fmts[j], rows[j], cols);
    std::vector<WeightPair> w;
    std::vector<Pair> outs;
    for (int j = 0; j < 5; ++j) w.push_back(upload(c, hw[size_t(j)])), outs.push_back(c.zeros(size_t(n) * rows[j]));
    Pair x = c.floats(c.rng.normals(size_t(n) * cols));
    std::vector<Backend::MatmulJob> jc, jg;
    for (int j = 0; j < 5; ++j) {
      jc.push_back({w[size_t(j)].cpu.get(), View(outs[size_t(j)].cpu.get())});
      jg.push_back({w[size_t(j)].gpu.get(), View(outs[size_t(j)].gpu.get())});
    }
    const uint64_t gemm_before = c.launches(gpu::kernels::gemm::id), rounded_before = c.launches(gpu::kernels::half_rows::id);
    c.cpu.matmul_group(jc, View(x.cpu.get()), n);
    c.gpu.matmul_group(jg, View(x.gpu.get()), n);
    // Two launches (4 jobs, then 1) read x rounded to half by one half_rows.
    if (c.launches(gpu::kernels::gemm::id) != gemm_before + 2 || c.launches(gpu::kernels::half_rows::id) != rounded_before + 1)
      throw Failure("5 jobs did not run as two gemm launches over one half_rows");
    for (int j = 0; j < 5; ++j) c.expect_close("matmul_group tiled", outs[size_t(j)], size_t(n) * rows[j], tiled_tol);
  });

  // Groups of 4-bit matrices in groups of 64: x rounded once in fragment order for gemm_q4 when every
  // job takes it; when one does not (8-bit here), in stored order for gemm, the 4-bit batch included.
  // Rows of 9 groups: two rounds of gemm_q4's staged scales (Q4_SCALE_GROUPS at a time).
  for (bool mixed : {false, true})
    add(std::string("matmul_group tiled q4") + (mixed ? " and q8" : ""), [mixed, tiled_tol](Ctx& c) {
      const int n = 65, cols = 576, count = 6;
      c.shape = std::string("6 matrices (") + (mixed ? "5 q4, the last q8" : "q4") + ") x 576, 65 tokens";
      const int rows[] = {72, 8, 136, 64, 16, 24};
      std::vector<HostWeight> hw;
      for (int j = 0; j < count; ++j) hw.emplace_back(c.rng, mixed && j == count - 1 ? "q8" : "q4", rows[j], cols);
      std::vector<WeightPair> w;
      std::vector<Pair> outs;
      for (int j = 0; j < count; ++j) w.push_back(upload(c, hw[size_t(j)])), outs.push_back(c.zeros(size_t(n) * rows[j]));
      Pair x = c.floats(c.rng.normals(size_t(n) * cols));
      std::vector<Backend::MatmulJob> jc, jg;
      for (int j = 0; j < count; ++j) {
        jc.push_back({w[size_t(j)].cpu.get(), View(outs[size_t(j)].cpu.get())});
        jg.push_back({w[size_t(j)].gpu.get(), View(outs[size_t(j)].gpu.get())});
      }
      // Launches this short take the columns in parts (two stagings of scales).
      const uint64_t q4_before = c.launches(gpu::kernels::gemm_q4_parts::id), gemm_before = c.launches(gpu::kernels::gemm::id);
      c.cpu.matmul_group(jc, View(x.cpu.get()), n);
      c.gpu.matmul_group(jg, View(x.gpu.get()), n);
      const uint64_t q4_launches = c.launches(gpu::kernels::gemm_q4_parts::id) - q4_before;
      const uint64_t gemm_launches = c.launches(gpu::kernels::gemm::id) - gemm_before;
      if (q4_launches != (mixed ? 0u : 2u) || gemm_launches != (mixed ? 2u : 0u))
        throw Failure("6 jobs ran " + std::to_string(q4_launches) + " gemm_q4_parts and " + std::to_string(gemm_launches) +
                      " gemm launches");
      for (int j = 0; j < count; ++j) c.expect_close("matmul_group tiled q4", outs[size_t(j)], size_t(n) * rows[j], tiled_tol);
    });
}

}  // namespace moelens::gpu_check
