#include "dot.h"

#include <algorithm>
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

// The 4-bit kernel reads a row in chunks of 128 columns (64 bytes; a last chunk may have 64). Dword i of a
// chunk holds columns 8i..8i+7, one per nibble, so shifting the chunk right by 4k leaves column 8i+k in
// the low bits of dword i, where vpermps looks up its value in a table of 0..15: a shift, a lookup and an
// FMA per 16 weights, no widening. The activations are stored to match (reorder_columns): in each chunk of
// width W, position k·(W/8) + i holds column 8i + k.
inline __m512 nibble_values() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

// Up to 16 consecutive scales or biases (groups g.., `count` of them) as fp32 lanes; the rest are 0.
inline __m512 group_values(const LinearWeight& w, const uint8_t* p, size_t g, int count) {
  const __mmask16 m = __mmask16((1u << count) - 1);
  switch (w.scale_dtype) {
    case DType::F32: return _mm512_maskz_loadu_ps(m, p + 4 * g);
    case DType::F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * g));
    default: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * g)), 16));
  }
}

// Nibble k of every dword of a 128-column chunk as fp32 (lane i: column 8i + k).
inline __m512 nibble16(__m512i v, int k) {
  return _mm512_permutexvar_ps(_mm512_srl_epi32(v, _mm_cvtsi32_si128(4 * k)), nibble_values());
}

// The 64-column last chunk: 8 lanes, the same lookups on 256-bit vectors (a two-source permute holds the
// 16-entry table).
inline __m256 nibble8(__m256i v, int k) {
  const __m256 lo = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), hi = _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15);
  return _mm256_permutex2var_ps(lo, _mm256_srl_epi32(v, _mm_cvtsi32_si128(4 * k)), hi);
}

// Σ q·x per lane over one 128-column chunk (lane i: columns 8i..8i+7), in two interleaved sums.
inline __m512 chunk_qdot(__m512i v, const float* x) {
  __m512 a0 = _mm512_mul_ps(nibble16(v, 0), _mm512_loadu_ps(x));
  __m512 a1 = _mm512_mul_ps(nibble16(v, 1), _mm512_loadu_ps(x + 16));
  for (int k = 2; k < 8; k += 2) {
    a0 = _mm512_fmadd_ps(nibble16(v, k), _mm512_loadu_ps(x + 16 * k), a0);
    a1 = _mm512_fmadd_ps(nibble16(v, k + 1), _mm512_loadu_ps(x + 16 * k + 16), a1);
  }
  return _mm512_add_ps(a0, a1);
}

// Walks a 4-bit row in blocks of up to 16 groups, whose scales and biases sit in one register each;
// `chunk(v, x, lane_group)` gets each 128-column chunk (v: 64 bytes) with the group index of every lane
// (lane i: columns 8i..8i+7), `tail(v, x, lane_group)` the 64-column last chunk if any (v: 32 bytes; its
// 8 lanes are the low ones of lane_group).
template <class Block, class Chunk, class Tail>
inline void for_q4_chunks(const LinearWeight& w, const Row& row, Block block, Chunk chunk, Tail tail) {
  const int gs = w.group_size;
  const int64_t groups = w.cols / gs;
  const __m512i per_chunk = _mm512_set1_epi32(128 / gs);
  const __m512i first = _mm512_srl_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm_cvtsi32_si128(__builtin_ctz(unsigned(gs)) - 3));
  const uint8_t* q = row.data;
  // The scales and biases are streams of their own, as far ahead in them as kPrefetchBytes is in the data.
  const size_t scale_bytes = w.scale_dtype == DType::F32 ? 4 : 2;
  const size_t scale_ahead = kPrefetchBytes * 2 * scale_bytes / size_t(gs);
  int64_t col = 0;
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int count = int(std::min<int64_t>(16, groups - g0));
    const size_t at = size_t(g0) * scale_bytes + scale_ahead;
    _mm_prefetch(reinterpret_cast<const char*>(row.scales) + at, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(row.biases) + at, _MM_HINT_T0);
    block(size_t(g0), count);
    const int64_t end = col + int64_t(count) * gs;
    __m512i lane_group = first;
    for (; col + 128 <= end; col += 128, q += 64, lane_group = _mm512_add_epi32(lane_group, per_chunk)) {
      // Rows of a matrix are contiguous: fetching ahead keeps more memory requests in flight than the
      // hardware prefetcher alone (decode is bound by how fast weights arrive).
      _mm_prefetch(reinterpret_cast<const char*>(q) + kPrefetchBytes, _MM_HINT_T0);
      chunk(_mm512_loadu_si512(q), col, lane_group);
    }
    if (col < end) tail(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), col, lane_group);
  }
}

// total += weight · (the row · x), as 16 lanes still to be summed. Scaling the groups' scales and biases
// by `weight` lets several rows (experts) share one horizontal sum.
inline void accumulate_row_q4(const LinearWeight& w, const Row& row, const float* xd, const float* gsum, __m512 weight,
                              __m512& total) {
  __m512 scales = weight;
  __m256 tail = _mm256_setzero_ps();
  for_q4_chunks(
      w, row,
      [&](size_t g, int count) {
        scales = _mm512_mul_ps(weight, group_values(w, row.scales, g, count));
        const __m512 gs = _mm512_maskz_loadu_ps(__mmask16((1u << count) - 1), gsum + g);
        total = _mm512_fmadd_ps(_mm512_mul_ps(weight, group_values(w, row.biases, g, count)), gs, total);
      },
      [&](__m512i v, int64_t col, __m512i lane_group) {
        total = _mm512_fmadd_ps(_mm512_permutexvar_ps(lane_group, scales), chunk_qdot(v, xd + col), total);
      },
      [&](__m256i v, int64_t col, __m512i lane_group) {
        const float* x = xd + col;
        __m256 a = _mm256_mul_ps(nibble8(v, 0), _mm256_loadu_ps(x));
        for (int k = 1; k < 8; ++k) a = _mm256_fmadd_ps(nibble8(v, k), _mm256_loadu_ps(x + 8 * k), a);
        tail = _mm256_mul_ps(_mm512_castps512_ps256(_mm512_permutexvar_ps(lane_group, scales)), a);
      });
  total = _mm512_add_ps(total, _mm512_zextps256_ps512(tail));
}

// A few tokens against one 4-bit row: each chunk is unpacked and scaled once (w = s·q as fp32) and then
// meets every token's activations.
template <int T>
void dot_row_tokens_q4(const LinearWeight& w, const Row& row, const PreparedInput* in, float* out) {
  __m512 acc[T], scales = _mm512_setzero_ps(), biases = scales;
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for_q4_chunks(
      w, row,
      [&](size_t g, int count) {
        scales = group_values(w, row.scales, g, count);
        biases = group_values(w, row.biases, g, count);
        const __mmask16 m = __mmask16((1u << count) - 1);
        for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(biases, _mm512_maskz_loadu_ps(m, in[t].gsum.data() + g), acc[t]);
      },
      [&](__m512i v, int64_t col, __m512i lane_group) {
        const __m512 s = _mm512_permutexvar_ps(lane_group, scales);
        for (int k = 0; k < 8; ++k) {
          const __m512 wk = _mm512_mul_ps(s, nibble16(v, k));
          for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(wk, _mm512_loadu_ps(in[t].xq + col + 16 * k), acc[t]);
        }
      },
      [&](__m256i v, int64_t col, __m512i lane_group) {
        const __m256 s = _mm512_castps512_ps256(_mm512_permutexvar_ps(lane_group, scales));
        for (int k = 0; k < 8; ++k) {
          const __m256 wk = _mm256_mul_ps(s, nibble8(v, k));
          for (int t = 0; t < T; ++t)
            acc[t] = _mm512_add_ps(acc[t], _mm512_zextps256_ps512(_mm256_mul_ps(wk, _mm256_loadu_ps(in[t].xq + col + 8 * k))));
        }
      });
  for (int t = 0; t < T; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
}

float dot_row_q4_avx512(const LinearWeight& w, const Row& row, const float* xd, const float* gsum) {
  __m512 total = _mm512_setzero_ps();
  accumulate_row_q4(w, row, xd, gsum, _mm512_set1_ps(1.f), total);
  return _mm512_reduce_add_ps(total);
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
  return w.bits == 4 && (w.group_size == 32 || w.group_size == 64 || w.group_size == 128) && w.cols % 64 == 0;
#else
  return false;
#endif
}
}  // namespace

bool uses_reordered_columns(const LinearWeight& w) { return q4_fast_path(w); }

void reorder_columns(const float* x, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 128) {
    const int lanes = int(std::min<int64_t>(128, cols - c) / 8);
    for (int k = 0; k < 8; ++k)
      for (int i = 0; i < lanes; ++i) out[c + k * lanes + i] = x[c + 8 * i + k];
  }
}

void dequantize_row_reordered(const LinearWeight& w, const Row& row, float* out) {
#if MOELENS_AVX512
  if (q4_fast_path(w)) {
    __m512 scales = _mm512_setzero_ps(), biases = scales;
    for_q4_chunks(
        w, row,
        [&](size_t g, int count) {
          scales = group_values(w, row.scales, g, count);
          biases = group_values(w, row.biases, g, count);
        },
        [&](__m512i v, int64_t col, __m512i lane_group) {
          const __m512 s = _mm512_permutexvar_ps(lane_group, scales), b = _mm512_permutexvar_ps(lane_group, biases);
          for (int k = 0; k < 8; ++k)
            _mm512_storeu_ps(out + col + 16 * k, _mm512_fmadd_ps(s, nibble16(v, k), b));
        },
        [&](__m256i v, int64_t col, __m512i lane_group) {
          const __m256 s = _mm512_castps512_ps256(_mm512_permutexvar_ps(lane_group, scales));
          const __m256 b = _mm512_castps512_ps256(_mm512_permutexvar_ps(lane_group, biases));
          for (int k = 0; k < 8; ++k) _mm256_storeu_ps(out + col + 8 * k, _mm256_fmadd_ps(s, nibble8(v, k), b));
        });
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
#if MOELENS_AVX512
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  if (i + 16 <= n) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    i += 16;
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif MOELENS_AVX2
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

#if MOELENS_AVX512
namespace {
// Columns [d0, d0 + 16·V) of weighted_rows_sum.
template <int V>
void weighted_rows_block(const float* weights, const float* rows, int64_t stride, int count, int64_t d0, float* out) {
  __m512 acc[V];
  for (int c = 0; c < V; ++c) acc[c] = _mm512_setzero_ps();
  for (int j = 0; j < count; ++j) {
    const __m512 p = _mm512_set1_ps(weights[j]);
    const float* row = rows + size_t(j) * size_t(stride) + d0;
    for (int c = 0; c < V; ++c) acc[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(row + 16 * c), acc[c]);
  }
  for (int c = 0; c < V; ++c) _mm512_storeu_ps(out + d0 + 16 * c, acc[c]);
}
}  // namespace
#endif

void weighted_rows_sum(const float* weights, const float* rows, int64_t stride, int count, int64_t dim, float* out) {
  int64_t d = 0;
#if MOELENS_AVX512
  for (; d + 128 <= dim; d += 128) weighted_rows_block<8>(weights, rows, stride, count, d, out);
  for (; d + 16 <= dim; d += 16) weighted_rows_block<1>(weights, rows, stride, count, d, out);
#endif
  if (d == dim) return;
  std::fill(out + d, out + dim, 0.f);
  for (int j = 0; j < count; ++j) axpy(weights[j], rows + size_t(j) * size_t(stride) + d, out + d, dim - d);
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

bool has_token_row_kernel(const LinearWeight& w) { return q4_fast_path(w); }

void dot_row_tokens(const LinearWeight& w, const Row& row, const PreparedInput* in, int tokens, float* out) {
#if MOELENS_AVX512
  if (q4_fast_path(w)) {
    switch (tokens) {
      case 1: return dot_row_tokens_q4<1>(w, row, in, out);
      case 2: return dot_row_tokens_q4<2>(w, row, in, out);
      case 3: return dot_row_tokens_q4<3>(w, row, in, out);
      case 4: return dot_row_tokens_q4<4>(w, row, in, out);
      case 5: return dot_row_tokens_q4<5>(w, row, in, out);
      case 6: return dot_row_tokens_q4<6>(w, row, in, out);
      case 7: return dot_row_tokens_q4<7>(w, row, in, out);
      case 8: return dot_row_tokens_q4<8>(w, row, in, out);
      default: break;
    }
  }
#endif
  for (int t = 0; t < tokens; ++t) out[t] = dot_row(w, row, in[t]);
}

float dot_rows_weighted(const LinearWeight& w, const Row* rows, const PreparedInput* in, const float* weights, int count) {
#if MOELENS_AVX512
  if (q4_fast_path(w)) {
    __m512 total = _mm512_setzero_ps();
    for (int j = 0; j < count; ++j)
      accumulate_row_q4(w, rows[j], in[j].xq, in[j].gsum.data(), _mm512_set1_ps(weights[j]), total);
    return _mm512_reduce_add_ps(total);
  }
#endif
  float acc = 0.f;
  for (int j = 0; j < count; ++j) acc += weights[j] * dot_row(w, rows[j], in[j]);
  return acc;
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
