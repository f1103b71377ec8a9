#include "gemm.h"

#include "dot.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define MOELENS_AVX512 1
#endif

namespace moelens::cpu {

#if MOELENS_AVX512
namespace {

// R weight rows x T activation rows over columns [k0, k1), 16 per step; stores into y when `first`,
// adds otherwise.
template <int R, int T>
void micro(const float* w, const float* x, int64_t cols, int64_t k0, int64_t k1, float* y, int64_t ldy, int64_t r0,
           bool first) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t k = k0; k < k1; k += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_ps(w + r * cols + k);
    for (int t = 0; t < T; ++t) {
      __m512 xv = _mm512_loadu_ps(x + t * cols + k);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      const float v = _mm512_reduce_add_ps(acc[r][t]);
      float& out = y[t * ldy + r0 + r];
      out = first ? v : out + v;
    }
}

// Columns in slices whose part of the weight tile (R x kSlice floats) stays in L1 while every token
// block streams past it.
constexpr int64_t kSlice = 256;

template <int R>
void rows_block(const float* w, const float* x, int n, int64_t cols, float* y, int64_t ldy, int64_t r0) {
  for (int64_t k0 = 0; k0 < cols; k0 += kSlice) {
    const int64_t k1 = k0 + kSlice < cols ? k0 + kSlice : cols;
    const bool first = k0 == 0;
    int t = 0;
    for (; t + 4 <= n; t += 4) micro<R, 4>(w, x + t * cols, cols, k0, k1, y + t * ldy, ldy, r0, first);
    // The last 1-3 tokens in one pass, so each weight vector is loaded once for all of them.
    switch (n - t) {
      case 3: micro<R, 3>(w, x + t * cols, cols, k0, k1, y + t * ldy, ldy, r0, first); break;
      case 2: micro<R, 2>(w, x + t * cols, cols, k0, k1, y + t * ldy, ldy, r0, first); break;
      case 1: micro<R, 1>(w, x + t * cols, cols, k0, k1, y + t * ldy, ldy, r0, first); break;
      default: break;
    }
  }
}

}  // namespace
#endif

void gemm_tile(const float* w, int rows, const float* x, int n, int64_t cols, float* y, int64_t ldy, int64_t r0) {
#if MOELENS_AVX512
  if (cols % 16 == 0) {
    switch (rows) {
      case 4: return rows_block<4>(w, x, n, cols, y, ldy, r0);
      case 3: return rows_block<3>(w, x, n, cols, y, ldy, r0);
      case 2: return rows_block<2>(w, x, n, cols, y, ldy, r0);
      case 1: return rows_block<1>(w, x, n, cols, y, ldy, r0);
      default: break;
    }
  }
#endif
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < n; ++t) y[t * ldy + r0 + r] = dot_f32(w + r * cols, x + t * cols, cols);
}

}  // namespace moelens::cpu
