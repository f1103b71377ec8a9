// Matrix products with stored weights: matmul and fused groups of matmuls of one input, as GEMVs
// (decode) or, for chunks that tiled(n) takes, as tiled GEMMs on the matrix units.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

static_assert(GEMM_THREADS == 128 && GEMM_TILE_TOKENS == 64 && GEMM_TILE_ROWS == 64,
              "gemm: a threadgroup is 4 simdgroups, each a 32x32 quarter of the tile");
static_assert(GEMM_K % 8 == 0 && (GEMM_TILE_ROWS * GEMM_K / 8) % GEMM_THREADS == 0,
              "gemm: the tile loaders give each thread whole runs of 8 columns");

void GpuBackend::gemv_jobs(const MatmulJob* jobs, size_t count, View x, int n) {
  shader::GemvParams p{};
  p.jobs = u32(count, "jobs");
  p.n = u32(size_t(n), "tokens");
  Call call(*this, k::gemv::id);
  const int w_at[] = {k::gemv::w0, k::gemv::w1, k::gemv::w2, k::gemv::w3};
  const int s_at[] = {k::gemv::s0, k::gemv::s1, k::gemv::s2, k::gemv::s3};
  const int b_at[] = {k::gemv::b0, k::gemv::b1, k::gemv::b2, k::gemv::b3};
  const int o_at[] = {k::gemv::out0, k::gemv::out1, k::gemv::out2, k::gemv::out3};
  for (size_t j = 0; j < GEMV_MAX_JOBS; ++j) {
    if (j >= count) {  // unused slots: bound, never read
      call.buf(w_at[j], nullptr).buf(s_at[j], nullptr).buf(b_at[j], nullptr).buf(o_at[j], nullptr);
      continue;
    }
    const auto& w = static_cast<const GpuWeight&>(*jobs[j].weight);
    if (w.experts) fail("gpu backend: matmul of an expert stack");
    if (j > 0 && w.desc.cols != p.cols) fail("gpu backend: matmul_group of matrices with different input sizes");
    p.w[j] = w.desc;
    p.cols = w.desc.cols;
    p.first_block[j] = p.total_blocks;
    p.total_blocks += ceil_div(w.desc.rows, GEMV_ROWS);
    call.buf(w_at[j], w.data.get()).buf(s_at[j], w.scales.get()).buf(b_at[j], w.biases.get()).buf(o_at[j], jobs[j].out);
  }
  p.x_vec4 = x.offset % 4 == 0 && p.cols % 4 == 0 ? 1u : 0u;
  size_t min_row_words = SIZE_MAX;
  for (size_t j = 0; j < count; ++j) min_row_words = std::min<size_t>(min_row_words, p.w[j].row_bytes / 4);
  p.split = split_k(p.total_blocks, p.n, min_row_words, GEMV_UNROLL);
  call.buf(k::gemv::x, x).params(k::gemv::p, p).grid(ceil_div(p.total_blocks, GEMV_SIMDGROUPS / p.split), p.n)
      .threads(GEMV_THREADS).run();
}

void GpuBackend::gemm_jobs(const MatmulJob* jobs, size_t count, View x, int n) {
  shader::GemmParams p{};
  p.jobs = u32(count, "jobs");
  p.n = u32(size_t(n), "tokens");
  Call call(*this, k::gemm::id);
  const int w_at[] = {k::gemm::w0, k::gemm::w1, k::gemm::w2, k::gemm::w3};
  const int s_at[] = {k::gemm::s0, k::gemm::s1, k::gemm::s2, k::gemm::s3};
  const int b_at[] = {k::gemm::b0, k::gemm::b1, k::gemm::b2, k::gemm::b3};
  const int o_at[] = {k::gemm::out0, k::gemm::out1, k::gemm::out2, k::gemm::out3};
  for (size_t j = 0; j < GEMV_MAX_JOBS; ++j) {
    if (j >= count) {  // unused slots: bound, never read
      call.buf(w_at[j], nullptr).buf(s_at[j], nullptr).buf(b_at[j], nullptr).buf(o_at[j], nullptr);
      continue;
    }
    const auto& w = static_cast<const GpuWeight&>(*jobs[j].weight);
    if (w.experts) fail("gpu backend: matmul of an expert stack");
    if (j > 0 && w.desc.cols != p.cols) fail("gpu backend: matmul_group of matrices with different input sizes");
    p.w[j] = w.desc;
    p.cols = w.desc.cols;
    p.first_tile[j] = p.total_tiles;
    p.total_tiles += ceil_div(w.desc.rows, GEMM_TILE_ROWS);
    call.buf(w_at[j], w.data.get()).buf(s_at[j], w.scales.get()).buf(b_at[j], w.biases.get()).buf(o_at[j], jobs[j].out);
  }
  call.buf(k::gemm::x, x).params(k::gemm::p, p).grid(p.total_tiles, ceil_div(p.n, GEMM_TILE_TOKENS))
      .threads(GEMM_THREADS).run();
}

static_assert(GEMM_EXACT_THREADS == 256 && GEMM_EXACT_TILE == 64,
              "gemm_exact: 16x16 threads, each 4x4 outputs of a 64x64 tile, loading one tile row");
static_assert(GEMM_EXACT_K % 8 == 0 && (GEMM_EXACT_TILE * GEMM_EXACT_K / 8) % GEMM_EXACT_THREADS == 0,
              "gemm_exact: the tile loaders give each thread whole runs of 8 columns");

void GpuBackend::gemm_exact_jobs(const MatmulJob* jobs, size_t count, View x, int n) {
  shader::GemmParams p{};
  p.jobs = u32(count, "jobs");
  p.n = u32(size_t(n), "tokens");
  namespace g = k::gemm_exact;
  Call call(*this, g::id);
  const int w_at[] = {g::w0, g::w1, g::w2, g::w3};
  const int s_at[] = {g::s0, g::s1, g::s2, g::s3};
  const int b_at[] = {g::b0, g::b1, g::b2, g::b3};
  const int o_at[] = {g::out0, g::out1, g::out2, g::out3};
  for (size_t j = 0; j < GEMV_MAX_JOBS; ++j) {
    if (j >= count) {  // unused slots: bound, never read
      call.buf(w_at[j], nullptr).buf(s_at[j], nullptr).buf(b_at[j], nullptr).buf(o_at[j], nullptr);
      continue;
    }
    const auto& w = static_cast<const GpuWeight&>(*jobs[j].weight);
    if (w.experts) fail("gpu backend: matmul of an expert stack");
    if (j > 0 && w.desc.cols != p.cols) fail("gpu backend: matmul_group of matrices with different input sizes");
    p.w[j] = w.desc;
    p.cols = w.desc.cols;
    p.first_tile[j] = p.total_tiles;
    p.total_tiles += ceil_div(w.desc.rows, GEMM_EXACT_TILE);
    call.buf(w_at[j], w.data.get()).buf(s_at[j], w.scales.get()).buf(b_at[j], w.biases.get()).buf(o_at[j], jobs[j].out);
  }
  call.buf(g::x, x).params(g::p, p).grid(p.total_tiles, ceil_div(p.n, GEMM_EXACT_TILE)).threads(GEMM_EXACT_THREADS).run();
}

void GpuBackend::matmul(const Weight& w, View x, int n, View out) {
  auto lock = enter();
  MatmulJob job{&w, out};
  if (tiled(n)) gemm_jobs(&job, 1, x, n);
  else gemv_jobs(&job, 1, x, n);
}

void GpuBackend::matmul_group(const std::vector<MatmulJob>& jobs, View x, int n) {
  auto lock = enter();
  // Chunks that tiled(n) takes: jobs that must be exact on the fp32 GEMM, the others on the fp16 one;
  // other calls on the fp32 GEMV kernels.
  std::vector<MatmulJob> fp32, fp16;
  for (const MatmulJob& j : jobs) (tiled(n) && !j.exact ? fp16 : fp32).push_back(j);
  for (size_t i = 0; i < fp16.size(); i += GEMV_MAX_JOBS)
    gemm_jobs(fp16.data() + i, std::min<size_t>(GEMV_MAX_JOBS, fp16.size() - i), x, n);
  for (size_t i = 0; i < fp32.size(); i += GEMV_MAX_JOBS) {
    const size_t count = std::min<size_t>(GEMV_MAX_JOBS, fp32.size() - i);
    if (tiled(n)) gemm_exact_jobs(fp32.data() + i, count, x, n);
    else gemv_jobs(fp32.data() + i, count, x, n);
  }
}

}  // namespace moelens::gpu
