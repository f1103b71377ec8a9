#include "dot.h"

#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MOELENS_AVX2 1
#endif
#if defined(__ARM_NEON)
#include <arm_neon.h>
#define MOELENS_NEON 1
#endif

namespace moelens::cpu {

namespace {

#if MOELENS_AVX2
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 consecutive 4-bit values of one uint32 word as floats, lowest nibble first.
inline __m256 nibbles8(uint32_t word) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(int(word)), shifts);
  return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0xF)));
}

inline __m256 bytes8(const uint8_t* p) {
  __m128i b;
  std::memcpy(&b, p, 8);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
}

inline __m256 bf16x8(const uint8_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
#endif

inline float scale_at(const LinearWeight& w, const uint8_t* p, size_t g) { return load_float(p, w.scale_dtype, g); }

// Σ q·x over one group (values unscaled).
inline float group_qdot(const uint8_t* q, const float* x, int gs, int bits) {
#if MOELENS_AVX2
  __m256 acc = _mm256_setzero_ps();
  if (bits == 4) {
    for (int i = 0; i < gs; i += 8) {
      uint32_t word;
      std::memcpy(&word, q + i / 2, 4);
      acc = _mm256_fmadd_ps(nibbles8(word), _mm256_loadu_ps(x + i), acc);
    }
  } else {
    for (int i = 0; i < gs; i += 8) acc = _mm256_fmadd_ps(bytes8(q + i), _mm256_loadu_ps(x + i), acc);
  }
  return hsum(acc);
#else
  float acc = 0.f;
  if (bits == 4) {
    for (int i = 0; i < gs; i += 2) {
      uint8_t b = q[i / 2];
      acc += float(b & 0xF) * x[i] + float(b >> 4) * x[i + 1];
    }
  } else {
    for (int i = 0; i < gs; ++i) acc += float(q[i]) * x[i];
  }
  return acc;
#endif
}

}  // namespace

void group_sums(const float* x, int64_t cols, int group_size, float* out) {
  for (int64_t g = 0; g < cols / group_size; ++g) {
    float s = 0.f;
    for (int i = 0; i < group_size; ++i) s += x[g * group_size + i];
    out[g] = s;
  }
}

float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
#if MOELENS_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
#elif MOELENS_NEON
  float32x4_t acc = vdupq_n_f32(0.f);
  for (; i + 4 <= n; i += 4) acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
  float s = vaddvq_f32(acc);
#else
  float s = 0.f;
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if MOELENS_AVX2
  __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

float dot_row(const LinearWeight& w, const Row& row, const float* x, const float* gsum) {
  const int64_t cols = w.cols;
  if (w.quantized()) {
    const int gs = w.group_size;
    const size_t groups = size_t(cols / gs);
    const size_t group_bytes = size_t(gs) * w.bits / 8;
    float acc = 0.f;
    for (size_t g = 0; g < groups; ++g) {
      float s = scale_at(w, row.scales, g), b = scale_at(w, row.biases, g);
      acc += s * group_qdot(row.data + g * group_bytes, x + g * gs, gs, w.bits) + b * gsum[g];
    }
    return acc;
  }
  switch (w.dtype) {
    case DType::F32: return dot_f32(reinterpret_cast<const float*>(row.data), x, cols);
#if MOELENS_AVX2
    case DType::BF16:
    case DType::F16: {
      __m256 acc = _mm256_setzero_ps();
      int64_t i = 0;
      for (; i + 8 <= cols; i += 8) {
        __m256 wv = w.dtype == DType::BF16 ? bf16x8(row.data + 2 * i) : f16x8(row.data + 2 * i);
        acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), acc);
      }
      float s = hsum(acc);
      for (; i < cols; ++i) s += load_float(row.data, w.dtype, size_t(i)) * x[i];
      return s;
    }
#endif
    default: {
      float s = 0.f;
      for (int64_t i = 0; i < cols; ++i) s += load_float(row.data, w.dtype, size_t(i)) * x[i];
      return s;
    }
  }
}

void dequantize_row(const LinearWeight& w, const Row& row, float* out) {
  const int64_t cols = w.cols;
  if (!w.quantized()) {
    if (w.dtype == DType::F32) {
      std::memcpy(out, row.data, size_t(cols) * 4);
      return;
    }
    for (int64_t i = 0; i < cols; ++i) out[i] = load_float(row.data, w.dtype, size_t(i));
    return;
  }
  const int gs = w.group_size;
  const size_t group_bytes = size_t(gs) * w.bits / 8;
  for (int64_t g = 0; g < cols / gs; ++g) {
    float s = scale_at(w, row.scales, size_t(g)), b = scale_at(w, row.biases, size_t(g));
    const uint8_t* q = row.data + size_t(g) * group_bytes;
    float* o = out + g * gs;
    if (w.bits == 4) {
      for (int i = 0; i < gs; i += 2) {
        o[i] = s * float(q[i / 2] & 0xF) + b;
        o[i + 1] = s * float(q[i / 2] >> 4) + b;
      }
    } else {
      for (int i = 0; i < gs; ++i) o[i] = s * float(q[i]) + b;
    }
  }
}

}  // namespace moelens::cpu
