#include "gemm.h"

#include <algorithm>

#include "dot.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define MOELENS_AVX512 1
#endif

namespace moelens::cpu {

namespace {

// Columns in slices: a slice of the weight tile (8 × 256 floats) and of a token block (256 × 16) stay in
// L1 while the slice is summed, and each slice's partial sums are added separately, which keeps fp32
// rounding close to that of the decode kernels' split sums.
constexpr int64_t kSlice = 256;

// acc[r][j] += Σ_{k in [k0, k1)} w[r, k] · x[j, k] for one token block. A block of at most 8 tokens
// (only ever the last) runs on 256-bit vectors, which Zen 4 issues twice as often as 512-bit ones: 30 %
// slower per lane here, but a short last block no longer pays for 16 lanes.
void slice_sums(const float* w, int64_t cols, const float* xb, int tokens, int64_t k0, int64_t k1,
                float acc[kGemmRows][kGemmTokens]) {
#if MOELENS_AVX512
  if (tokens <= 8) {
    __m256 a[kGemmRows];
    for (int r = 0; r < kGemmRows; ++r) a[r] = _mm256_setzero_ps();
    for (int64_t k = k0; k < k1; ++k) {
      const __m256 xv = _mm256_loadu_ps(xb + k * kGemmTokens);
      for (int r = 0; r < kGemmRows; ++r) a[r] = _mm256_fmadd_ps(_mm256_set1_ps(w[r * cols + k]), xv, a[r]);
    }
    for (int r = 0; r < kGemmRows; ++r) _mm256_storeu_ps(acc[r], _mm256_add_ps(_mm256_loadu_ps(acc[r]), a[r]));
    return;
  }
  __m512 a[kGemmRows];
  for (int r = 0; r < kGemmRows; ++r) a[r] = _mm512_setzero_ps();
  for (int64_t k = k0; k < k1; ++k) {
    const __m512 xv = _mm512_loadu_ps(xb + k * kGemmTokens);
    for (int r = 0; r < kGemmRows; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[r * cols + k]), xv, a[r]);
  }
  for (int r = 0; r < kGemmRows; ++r) _mm512_storeu_ps(acc[r], _mm512_add_ps(_mm512_loadu_ps(acc[r]), a[r]));
#else
  for (int r = 0; r < kGemmRows; ++r) {
    float a[kGemmTokens] = {};
    for (int64_t k = k0; k < k1; ++k)
      for (int j = 0; j < tokens; ++j) a[j] += w[r * cols + k] * xb[k * kGemmTokens + j];
    for (int j = 0; j < tokens; ++j) acc[r][j] += a[j];
  }
#endif
}

}  // namespace

void pack_tokens(const float* x, int n, int64_t cols, bool reorder, PackedTokens* out) {
  out->n = n;
  out->cols = cols;
  out->reordered = reorder;
  out->data.resize(size_t(out->blocks()) * size_t(cols) * kGemmTokens);  // a reused buffer keeps its pages
  // source[p]: the column stored at position p (reorder_columns applied to the column numbers)
  std::vector<float> source(static_cast<size_t>(cols));
  for (int64_t k = 0; k < cols; ++k) source[size_t(k)] = float(k);
  if (reorder) {
    std::vector<float> index = source;
    reorder_columns(index.data(), cols, source.data());
  }
  for (int b = 0; b < out->blocks(); ++b) {
    const int tokens = std::min(kGemmTokens, n - b * kGemmTokens);
    const float* xb = x + size_t(b) * kGemmTokens * size_t(cols);
    float* dst = out->data.data() + size_t(b) * size_t(cols) * kGemmTokens;
    for (int64_t p = 0; p < cols; ++p, dst += kGemmTokens) {
      const size_t c = size_t(source[size_t(p)]);
      for (int j = 0; j < tokens; ++j) dst[j] = xb[size_t(j) * size_t(cols) + c];
      for (int j = tokens; j < kGemmTokens; ++j) dst[j] = 0.f;
    }
  }
}

void gemm_tile(const float* w, int rows, const PackedTokens& x, float* y, int64_t ldy, int64_t r0) {
  const int64_t cols = x.cols;
  for (int b = 0; b < x.blocks(); ++b) {
    const int tokens = std::min(kGemmTokens, x.n - b * kGemmTokens);
    float acc[kGemmRows][kGemmTokens] = {};
    for (int64_t k0 = 0; k0 < cols; k0 += kSlice)
      slice_sums(w, cols, x.block(b), tokens, k0, std::min(cols, k0 + kSlice), acc);
    for (int j = 0; j < tokens; ++j) {
      float* out = y + (int64_t(b) * kGemmTokens + j) * ldy + r0;
      for (int r = 0; r < rows; ++r) out[r] = acc[r][j];
    }
  }
}

}  // namespace moelens::cpu
