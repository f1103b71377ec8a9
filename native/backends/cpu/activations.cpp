#include "activations.h"

#include <initializer_list>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace moelens::cpu {

#if defined(__AVX512F__)
// GCC 12 warns that its own intrinsics' undefined pass-through operand "may be used uninitialized".
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace {
// e^y for 16 lanes: y = k·ln2 + r with |r| <= ln2/2 (ln2 in two parts, so r is exact to fp32), e^r from
// its Taylor polynomial to degree 7 (truncation below 1e-8 relative), times 2^k by scalef (which
// overflows to inf and underflows to 0 as expf does). y is clamped to [-104, 89], beyond which e^y is 0
// or inf in fp32 anyway; the clamp keeps k·ln2 - y finite for infinite y.
inline __m512 exp16(__m512 y) {
  y = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(-104.f)), _mm512_set1_ps(89.f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(y, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), y);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040.f);
  for (float c : {1.f / 720.f, 1.f / 120.f, 1.f / 24.f, 1.f / 6.f, 0.5f, 1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, k);
}
}  // namespace
#pragma GCC diagnostic pop
#endif

void silu_inplace(float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
    _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.f), e)));
  }
#endif
  for (; i < n; ++i) x[i] = silu(x[i]);
}

}  // namespace moelens::cpu
