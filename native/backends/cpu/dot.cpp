#include "dot.h"

#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MOELENS_AVX2 1
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define MOELENS_AVX512 1
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

#if MOELENS_AVX512
// 16 bytes -> 16 floats
inline __m512 u8x16(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); }

constexpr int kPrefetchBytes = 2048;

// A 4-bit row against activations deinterleaved per 64 columns (the 32 even columns, then the 32 odd
// ones, see deinterleave64): each packed byte holds an even column in its low nibble and the next odd
// column in its high nibble, so masks and one shift unpack 64 weights without shuffles.
float dot_row_q4_avx512(const LinearWeight& w, const Row& row, const float* xd, const float* gsum) {
  const int gs = w.group_size;
  const size_t groups = size_t(w.cols / gs);
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m512 total = _mm512_setzero_ps();
  float bias_part = 0.f;
  const uint8_t* q = row.data;
  const float* x = xd;
  for (size_t g = 0; g < groups; ++g) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    // Rows of a matrix are contiguous: fetching ahead keeps more memory requests in flight than the
    // hardware prefetcher alone (decode is bound by how fast weights arrive).
    _mm_prefetch(reinterpret_cast<const char*>(q) + kPrefetchBytes, _MM_HINT_T0);
    for (int i = 0; i < gs; i += 64, q += 32, x += 64) {
      __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
      __m256i lo = _mm256_and_si256(b, low);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low);
      acc0 = _mm512_fmadd_ps(u8x16(_mm256_castsi256_si128(lo)), _mm512_loadu_ps(x), acc0);
      acc1 = _mm512_fmadd_ps(u8x16(_mm256_extracti128_si256(lo, 1)), _mm512_loadu_ps(x + 16), acc1);
      acc0 = _mm512_fmadd_ps(u8x16(_mm256_castsi256_si128(hi)), _mm512_loadu_ps(x + 32), acc0);
      acc1 = _mm512_fmadd_ps(u8x16(_mm256_extracti128_si256(hi, 1)), _mm512_loadu_ps(x + 48), acc1);
    }
    const float s = scale_at(w, row.scales, g), b = scale_at(w, row.biases, g);
    total = _mm512_fmadd_ps(_mm512_set1_ps(s), _mm512_add_ps(acc0, acc1), total);
    bias_part += b * gsum[g];
  }
  return _mm512_reduce_add_ps(total) + bias_part;
}

float dot_row_q8_avx512(const LinearWeight& w, const Row& row, const float* x, const float* gsum) {
  const int gs = w.group_size;
  const size_t groups = size_t(w.cols / gs);
  __m512 total = _mm512_setzero_ps();
  float bias_part = 0.f;
  const uint8_t* q = row.data;
  for (size_t g = 0; g < groups; ++g) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int i = 0; i < gs; i += 32, q += 32, x += 32) {
      __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
      acc0 = _mm512_fmadd_ps(u8x16(_mm256_castsi256_si128(b)), _mm512_loadu_ps(x), acc0);
      acc1 = _mm512_fmadd_ps(u8x16(_mm256_extracti128_si256(b, 1)), _mm512_loadu_ps(x + 16), acc1);
    }
    const float s = scale_at(w, row.scales, g), b = scale_at(w, row.biases, g);
    total = _mm512_fmadd_ps(_mm512_set1_ps(s), _mm512_add_ps(acc0, acc1), total);
    bias_part += b * gsum[g];
  }
  return _mm512_reduce_add_ps(total) + bias_part;
}
#endif

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
#elif MOELENS_NEON
  float32x4_t acc0 = vdupq_n_f32(0.f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int i = 0;
  for (; i + 16 <= gs; i += 16) {
    uint8x16_t v;
    if (bits == 4) {
      // 8 bytes hold 16 values, low nibble first: unpack and interleave back into column order.
      uint8x8_t b = vld1_u8(q + i / 2);
      uint8x8x2_t z = vzip_u8(vand_u8(b, vdup_n_u8(0x0F)), vshr_n_u8(b, 4));
      v = vcombine_u8(z.val[0], z.val[1]);
    } else {
      v = vld1q_u8(q + i);
    }
    uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_u8(vget_high_u8(v));
    acc0 = vfmaq_f32(acc0, vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))), vld1q_f32(x + i));
    acc1 = vfmaq_f32(acc1, vcvtq_f32_u32(vmovl_u16(vget_high_u16(lo))), vld1q_f32(x + i + 4));
    acc2 = vfmaq_f32(acc2, vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))), vld1q_f32(x + i + 8));
    acc3 = vfmaq_f32(acc3, vcvtq_f32_u32(vmovl_u16(vget_high_u16(hi))), vld1q_f32(x + i + 12));
  }
  float acc = vaddvq_f32(vaddq_f32(vaddq_f32(acc0, acc1), vaddq_f32(acc2, acc3)));
  for (; i < gs; ++i) acc += float(bits == 4 ? (q[i / 2] >> (4 * (i & 1))) & 0xF : q[i]) * x[i];
  return acc;
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

namespace {
bool q4_fast_path(const LinearWeight& w) {
#if MOELENS_AVX512
  return w.bits == 4 && w.group_size % 64 == 0;
#else
  return false;
#endif
}
}  // namespace

bool uses_reordered_columns(const LinearWeight& w) { return q4_fast_path(w); }

void reorder_columns(const float* x, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols; b += 64)
    for (int i = 0; i < 32; ++i) {
      out[b + i] = x[b + 2 * i];
      out[b + 32 + i] = x[b + 2 * i + 1];
    }
}

void dequantize_row_reordered(const LinearWeight& w, const Row& row, float* out) {
#if MOELENS_AVX512
  if (q4_fast_path(w)) {
    const int gs = w.group_size;
    const __m256i low = _mm256_set1_epi8(0x0F);
    const uint8_t* q = row.data;
    for (int64_t g = 0; g < w.cols / gs; ++g) {
      const __m512 s = _mm512_set1_ps(scale_at(w, row.scales, size_t(g)));
      const __m512 b = _mm512_set1_ps(scale_at(w, row.biases, size_t(g)));
      for (int i = 0; i < gs; i += 64, q += 32, out += 64) {
        __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
        __m256i lo = _mm256_and_si256(v, low);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        _mm512_storeu_ps(out, _mm512_fmadd_ps(s, u8x16(_mm256_castsi256_si128(lo)), b));
        _mm512_storeu_ps(out + 16, _mm512_fmadd_ps(s, u8x16(_mm256_extracti128_si256(lo, 1)), b));
        _mm512_storeu_ps(out + 32, _mm512_fmadd_ps(s, u8x16(_mm256_castsi256_si128(hi)), b));
        _mm512_storeu_ps(out + 48, _mm512_fmadd_ps(s, u8x16(_mm256_extracti128_si256(hi, 1)), b));
      }
    }
    return;
  }
  if (w.quantized() && w.bits == 8 && w.group_size % 16 == 0) {
    const int gs = w.group_size;
    const uint8_t* q = row.data;
    for (int64_t g = 0; g < w.cols / gs; ++g) {
      const __m512 s = _mm512_set1_ps(scale_at(w, row.scales, size_t(g)));
      const __m512 b = _mm512_set1_ps(scale_at(w, row.biases, size_t(g)));
      for (int i = 0; i < gs; i += 16, q += 16, out += 16)
        _mm512_storeu_ps(out, _mm512_fmadd_ps(s, u8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))), b));
    }
    return;
  }
#endif
  dequantize_row(w, row, out);
}

void prepare_input(const LinearWeight& w, const float* x, PreparedInput* in) {
  in->x = x;
  in->xq = x;
  if (!w.quantized()) return;
  const int gs = w.group_size;
  const int64_t groups = w.cols / gs;
  in->gsum.resize(size_t(groups));
  for (int64_t g = 0; g < groups; ++g) {
    float s = 0.f;
    for (int i = 0; i < gs; ++i) s += x[g * gs + i];
    in->gsum[size_t(g)] = s;
  }
  if (q4_fast_path(w)) {
    in->reordered.resize(size_t(w.cols));
    reorder_columns(x, w.cols, in->reordered.data());
    in->xq = in->reordered.data();
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

float dot_row(const LinearWeight& w, const Row& row, const PreparedInput& in) {
  const int64_t cols = w.cols;
  const float* x = in.x;
  if (w.quantized()) {
    const float* gsum = in.gsum.data();
#if MOELENS_AVX512
    if (q4_fast_path(w)) return dot_row_q4_avx512(w, row, in.xq, gsum);
    if (w.bits == 8 && w.group_size % 32 == 0) return dot_row_q8_avx512(w, row, x, gsum);
#endif
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
#elif MOELENS_NEON
    case DType::BF16: {
      float32x4_t acc = vdupq_n_f32(0.f);
      int64_t i = 0;
      for (; i + 4 <= cols; i += 4) {
        uint16x4_t h = vld1_u16(reinterpret_cast<const uint16_t*>(row.data) + i);
        acc = vfmaq_f32(acc, vreinterpretq_f32_u32(vshll_n_u16(h, 16)), vld1q_f32(x + i));
      }
      float s = vaddvq_f32(acc);
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
