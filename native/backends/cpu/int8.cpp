#include "int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MOELENS_I8_AVX2 1
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define MOELENS_I8_VNNI 1
#endif
#if defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#define MOELENS_I8_NEON 1
#endif

namespace moelens::cpu {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Int8: return "int8";
    case Precision::Int16: return "int16";
    case Precision::Int24: return "int24";
    default: return "fp32";
  }
}

bool parse_precision(const std::string& name, Precision* out) {
  if (name == "fp32") *out = Precision::F32;
  else if (name == "int8") *out = Precision::Int8;
  else if (name == "int16") *out = Precision::Int16;
  else if (name == "int24") *out = Precision::Int24;
  else return false;
  return true;
}

const char* int8_kernel_name() {
#if MOELENS_I8_VNNI
  return "avx512-vnni";
#elif MOELENS_I8_AVX2
  return "avx2";
#elif MOELENS_I8_NEON && defined(__ARM_FEATURE_DOTPROD)
  return "neon-dotprod";
#elif MOELENS_I8_NEON
  return "neon";
#else
  return "scalar";
#endif
}

namespace {

constexpr int kBlock = 32;
inline int64_t chunk_cols(int bits) { return bits == 4 ? 128 : 64; }
// The 32-column block whose products int32 lane l (0..15) of chunk c sums (see Int8Input).
inline int64_t lane_block(int bits, int64_t c, int l) { return bits == 4 ? 4 * c + l / 4 : 2 * c + l / 8; }

// The largest |q| of a precision: 127 · 128^(planes - 1), so that the top plane stays within ±127.
inline float max_q(int planes) { return 127.f * float(1 << (7 * (planes - 1))); }

// Digit `plane` (0 = most significant) of q in base 128, balanced: q = Σ_p 128^(planes-1-p) · digit_p, the
// top digit within ±127, the others within ±64 (each rounds what the ones above leave, half to even).
inline int8_t plane_digit(int32_t q, int planes, int plane) {
  int32_t rest = q;
  for (int p = 0; p < planes - 1; ++p) {
    const int shift = 7 * (planes - 1 - p);
    const int32_t digit = int32_t(std::nearbyint(float(rest) * (1.f / float(1 << shift))));
    if (p == plane) return int8_t(digit);
    rest -= digit * (1 << shift);
  }
  return int8_t(rest);
}

inline int weight_at(const uint8_t* data, int bits, int64_t col) {
  return bits == 8 ? data[col] : (data[col / 2] >> (4 * (col & 1))) & 0xF;
}

// n floats stored as F32 / F16 / BF16 -> fp32.
[[maybe_unused]] void to_f32(const uint8_t* p, DType t, int64_t n, float* out) {
  int64_t i = 0;
#if MOELENS_I8_VNNI
  if (t == DType::BF16)
    for (; i + 16 <= n; i += 16) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i));
      _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
#elif MOELENS_I8_AVX2
  if (t == DType::BF16)
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
#endif
  if (t == DType::F32) {
    std::memcpy(out + i, p + 4 * i, size_t(n - i) * 4);
    return;
  }
#if MOELENS_I8_VNNI
  if (t == DType::BF16 && i < n) {  // the last 1-15
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p + 2 * i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    return;
  }
#endif
  for (; i < n; ++i) out[i] = load_float(p, t, size_t(i));
}

#if MOELENS_I8_AVX2 && !MOELENS_I8_VNNI
// One weight row's scales and biases as fp32, followed by 16 zeros, so that vector loads past the last
// group (up to the activations' gstride, at most 15 past) read zeros. For the AVX2 kernels; the
// AVX-512 ones widen the stored values in registers (LaneScales).
class RowScales {
 public:
  RowScales(const LinearWeight& w, const Row& row) {
    const int64_t groups = w.cols / w.group_size;
    if (groups + 16 <= kStack) {
      s = sbuf_;
      b = bbuf_;
    } else {
      heap_.resize(size_t(2 * (groups + 16)));
      s = heap_.data();
      b = heap_.data() + groups + 16;
    }
    to_f32(row.scales, w.scale_dtype, groups, s);
    to_f32(row.biases, w.scale_dtype, groups, b);
    for (int i = 0; i < 16; ++i) s[groups + i] = b[groups + i] = 0.f;
  }
  float* s;
  float* b;

 private:
  static constexpr int64_t kStack = 528;
  float sbuf_[kStack], bbuf_[kStack];
  std::vector<float> heap_;
};
#endif

}  // namespace

bool int8_supported(const LinearWeight& w) {
  const int g = w.group_size;
  return w.quantized() && (w.bits == 4 || w.bits == 8) && g >= kBlock && (g & (g - 1)) == 0 && w.cols % g == 0 &&
         is_float_dtype(w.scale_dtype);
}

void Int8Input::init(const LinearWeight& w, int rows, int activation_planes) {
  n = rows;
  planes = activation_planes;
  cols = w.cols;
  bits = w.bits;
  group_size = w.group_size;
  blocks = cols / kBlock;
  const int64_t cc = chunk_cols(bits);
  chunks = (cols + cc - 1) / cc;
  kstride = chunks * cc * planes;
  gstride = (cols / group_size + 15) / 16 * 16;
  for (gshift = 0; (1 << gshift) < group_size;) ++gshift;
  for (int l = 0; l < 16; ++l) lane_group[l] = int32_t((lane_block(bits, 0, l) * kBlock) >> gshift);
  q.assign(size_t(n) * size_t(cols), 0);
  qk.assign(size_t(n) * size_t(kstride), 0);
  d.assign(size_t(n) * size_t(blocks), 0.f);
  dlane.assign(size_t(n) * size_t(chunks) * 16, 0.f);
  quads = bits == 4 ? cols / cc / 4 : 0;
  dquad.assign(size_t(n) * size_t(quads) * 16, 0.f);
  bsum.assign(size_t(n) * size_t(gstride), 0.f);
}

void Int8Input::quantize_row(const float* x, int t) {
  int32_t* qr = q.data() + size_t(t) * size_t(cols);
  float* dr = d.data() + size_t(t) * size_t(blocks);
  float* bs = bsum.data() + size_t(t) * size_t(gstride);
  int8_t* kr = qk.data() + size_t(t) * size_t(kstride);
  const float qmax = max_q(planes);
  const int64_t cc = chunk_cols(bits);
  // Every ISA computes the same values (round(x / d), half to even, is exact IEEE arithmetic either
  // way), so every kernel sees the same activations; moelens-dot-test compares the builds.
#if MOELENS_I8_VNNI
  const __m512 hi = _mm512_set1_ps(qmax), lo = _mm512_set1_ps(-qmax);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t j = 0; j < blocks; ++j) {
    const __m512 xa = _mm512_loadu_ps(x + j * kBlock), xb = _mm512_loadu_ps(x + j * kBlock + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(xa), _mm512_abs_ps(xb)));
    const float dj = amax / qmax;
    __m512i qa = _mm512_setzero_si512(), qb = _mm512_setzero_si512();
    if (dj > 0.f) {
      const __m512 dv = _mm512_set1_ps(dj);
      auto quant = [&](__m512 v) {
        v = _mm512_roundscale_ps(_mm512_div_ps(v, dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);  // NaN -> 0
        return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
      };
      qa = quant(xa);
      qb = quant(xb);
    }
    dr[j] = dj;
    bs[j * kBlock / group_size] += dj * float(_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb)));
    _mm512_storeu_si512(qr + j * kBlock, qa);
    _mm512_storeu_si512(qr + j * kBlock + 16, qb);
    // Kernel order: the planes' digits, most significant first (see plane_digit).
    const int64_t c = j / (cc / kBlock), jj = j % (cc / kBlock);
    __m512i ra = qa, rb = qb;  // what the planes so far leave
    for (int plane = 0; plane < planes; ++plane) {
      __m512i va = ra, vb = rb;
      if (plane + 1 < planes) {
        const int shift = 7 * (planes - 1 - plane);
        const __m512 r = _mm512_set1_ps(1.f / float(1 << shift));  // a power of two: the product is exact
        auto digit = [&](__m512i v) {
          return _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(v), r), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        };
        va = digit(ra);
        vb = digit(rb);
        ra = _mm512_sub_epi32(ra, _mm512_slli_epi32(va, shift));
        rb = _mm512_sub_epi32(rb, _mm512_slli_epi32(vb, shift));
      }
      int8_t* o = kr + (c * planes + plane) * cc;
      if (bits == 4) {  // even columns of the block at 16·jj, odd ones at 64 + 16·jj
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 16 * jj), _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(va, even, vb)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 64 + 16 * jj), _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(va, odd, vb)));
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32 * jj), _mm512_cvtepi32_epi8(va));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32 * jj + 16), _mm512_cvtepi32_epi8(vb));
      }
    }
  }
#else
  for (int64_t j = 0; j < blocks; ++j) {
    const float* xb = x + j * kBlock;
    float amax = 0.f;
    for (int k = 0; k < kBlock; ++k) amax = std::max(amax, std::fabs(xb[k]));
    const float dj = amax / qmax;
    int sum = 0;
    for (int k = 0; k < kBlock; ++k) {
      float v = dj > 0.f ? std::nearbyint(xb[k] / dj) : 0.f;
      v = v == v ? v : 0.f;  // NaN -> 0
      v = v > qmax ? qmax : v < -qmax ? -qmax : v;
      qr[j * kBlock + k] = int32_t(v);
      sum += int(v);
    }
    dr[j] = dj;
    bs[j * kBlock / group_size] += dj * float(sum);
  }
  // Kernel order, per chunk: the planes' digits, most significant first (see plane_digit).
  auto value = [&](int64_t col, int plane) -> int8_t { return col < cols ? plane_digit(qr[col], planes, plane) : 0; };
  for (int64_t c = 0; c < chunks; ++c)
    for (int plane = 0; plane < planes; ++plane) {
      int8_t* o = kr + (c * planes + plane) * cc;
      if (bits == 4) {
        for (int64_t p = 0; p < 64; ++p) {
          o[p] = value(c * 128 + 2 * p, plane);
          o[64 + p] = value(c * 128 + 2 * p + 1, plane);
        }
      } else {
        for (int64_t p = 0; p < 64; ++p) o[p] = value(c * 64 + p, plane);
      }
    }
#endif
  float* dl = dlane.data() + size_t(t) * size_t(chunks) * 16;
  for (int64_t c = 0; c < chunks; ++c)
    for (int l = 0; l < 16; ++l) {
      const int64_t b = lane_block(bits, c, l);
      dl[c * 16 + l] = b < blocks ? dr[b] : 0.f;
    }
  float* dq = dquad.data() + size_t(t) * size_t(quads) * 16;
  for (int64_t g = 0; g < quads; ++g)
    for (int l = 0; l < 16; ++l) dq[g * 16 + l] = dr[16 * g + 4 * (l % 4) + l / 4];  // block l/4 of chunk 4g + l%4
}

void Int8Input::pack() {
#if MOELENS_I8_VNNI
  if (!tiled()) return;  // the row kernel reads qk
  const int64_t tblocks = (n + 15) / 16, dwords = kstride / 4;
  packed.assign(size_t(tblocks * dwords * 16), 0);
  packed_d.assign(size_t(tblocks * blocks * 16), 0.f);
  packed_bsum.assign(size_t(tblocks * gstride * 16), 0.f);
  for (int t = 0; t < n; ++t) {
    const int64_t tb = t / 16, lane = t % 16;
    const int8_t* kr = qk.data() + size_t(t) * size_t(kstride);
    int32_t* pk = packed.data() + tb * dwords * 16 + lane;
    for (int64_t i = 0; i < dwords; ++i) std::memcpy(pk + i * 16, kr + 4 * i, 4);
    for (int64_t j = 0; j < blocks; ++j) packed_d[size_t((tb * blocks + j) * 16 + lane)] = d[size_t(t * blocks + j)];
    for (int64_t g = 0; g < gstride; ++g) packed_bsum[size_t((tb * gstride + g) * 16 + lane)] = bsum[size_t(t * gstride + g)];
  }
  // Block j's columns: for 4-bit, dwords 4·jj.. of the chunk's even half and of its odd half (jj = j mod
  // 4); for 8-bit, dwords 8·jj.. (jj = j mod 2).
  const int64_t cc = chunk_cols(bits), per_chunk = cc / kBlock, pd = cc / 4;
  block_xoff.resize(size_t(blocks * 8));
  block_woff.resize(size_t(blocks * 8));
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t c = j / per_chunk, jj = j % per_chunk;
    for (int i = 0; i < 8; ++i) {
      const int64_t m = bits == 4 ? (i < 4 ? 4 * jj + i : 16 + 4 * jj + i - 4) : 8 * jj + i;
      block_xoff[size_t(j * 8 + i)] = int32_t(c * planes * pd + m);
      block_woff[size_t(j * 8 + i)] = int32_t(4 * (c * pd + m));
    }
  }
#endif
}

void quantize_input(const LinearWeight& w, const float* x, int n, Int8Input* out, int planes) {
  out->init(w, n, planes);
  for (int t = 0; t < n; ++t) out->quantize_row(x + size_t(t) * size_t(w.cols), t);
  out->pack();
}

float dot_row_int8_reference(const LinearWeight& w, const Row& row, const Int8Input& in, int t) {
  const int g = w.group_size;
  const int64_t groups = w.cols / g, per_group = g / kBlock;
  const int32_t* xq = in.q.data() + size_t(t) * size_t(in.cols);
  const float* d = in.d.data() + size_t(t) * size_t(in.blocks);
  const float* bs = in.bsum.data() + size_t(t) * size_t(in.gstride);
  float acc = 0.f;
  for (int64_t G = 0; G < groups; ++G) {
    float sg = 0.f;
    for (int64_t jb = 0; jb < per_group; ++jb) {
      const int64_t j = G * per_group + jb;
      int64_t dot = 0;  // 32 products of up to 255 · 2080768 (int24) overflow int32
      for (int64_t col = j * kBlock; col < (j + 1) * kBlock; ++col) dot += int64_t(weight_at(row.data, w.bits, col)) * xq[col];
      sg += d[j] * float(dot);
    }
    acc += load_float(row.scales, w.scale_dtype, size_t(G)) * sg + load_float(row.biases, w.scale_dtype, size_t(G)) * bs[G];
  }
  return acc;
}

namespace {

#if MOELENS_I8_VNNI
// Software prefetch of the weight stream: into L1 2 KB ahead, and into L2 16 KB ahead, which keeps
// enough lines in flight to cover DRAM latency while the core computes (decode measured 12 % faster
// than with the L1 prefetch alone; 8 to 32 KB ahead performed alike). Past the end of a call's rows,
// the next rows are usually the same thread's next chunk: stopping the prefetch at the end of each
// call's rows measured 12 % slower.
constexpr int kPrefetchBytes = 2048, kPrefetchL2Bytes = 16384;
inline void prefetch_weights(const uint8_t* p, int lines) {
  for (int j = 0; j < lines; ++j) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes + 64 * j, _MM_HINT_T0);
  for (int j = 0; j < lines; ++j) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchL2Bytes + 64 * j, _MM_HINT_T1);
}

// How a row stores its scales and biases: kScale 0 BF16, 1 F16, 2 F32.
inline int scale_kind(DType t) { return t == DType::BF16 ? 0 : t == DType::F16 ? 1 : 2; }

// 16 stored values from element i (the first n of them when m masks), as fp32.
template <int kScale>
inline __m512 load16_f32(const uint8_t* p, int64_t i, __mmask16 m) {
  if (kScale == 2) return _mm512_maskz_loadu_ps(m, p + 4 * i);
  const __m256i h = _mm256_maskz_loadu_epi16(m, p + 2 * i);
  if (kScale == 0) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

inline __mmask16 first_n(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// The scale of the group each int32 lane of a chunk belongs to, read straight from the row's stored
// scales and widened in registers (an fp32 copy written just before would stall these loads on store
// forwarding, which costs more than the row's arithmetic on short rows).
// One LaneScales serves every row of a layout.
template <int kScale>
struct LaneScales {
  int64_t groups;
  int64_t per_chunk;   // groups a chunk spans (1 when one group covers it)
  __m512i idx;         // BF16: source word per odd 16-bit half; F16: source word per low word; F32: per dword
  __mmask16 full;      // the groups of a whole chunk
  __m512i quad_idx;    // the same for a quad's reduced lanes (lane 4L + i: block L of chunk i)
  __mmask16 quad_full; // the groups of a quad
  explicit LaneScales(const Int8Input& in)
      : groups(in.cols >> in.gshift), per_chunk(std::max<int64_t>(1, chunk_cols(in.bits) >> in.gshift)),
        full(first_n(per_chunk)), quad_full(first_n(std::max<int64_t>(1, (4 * chunk_cols(in.bits)) >> in.gshift))) {
    idx = widen_index(_mm512_loadu_si512(in.lane_group));
    alignas(64) int32_t quad_group[16];
    for (int l = 0; l < 16; ++l) quad_group[l] = int32_t(((4 * (l % 4) + l / 4) * kBlock) >> in.gshift);
    quad_idx = widen_index(_mm512_load_si512(quad_group));
  }
  // Lanes of the chunk whose first group is g0, from a row's scales p; `whole`: the chunk lies within the row.
  __m512 operator()(const uint8_t* p, int64_t g0, bool whole = false) const {
    return expand(p, g0, whole ? full : first_n(std::min(per_chunk, groups - g0)), idx);
  }
  // Lanes of the (whole) quad whose first group is g0.
  __m512 quad(const uint8_t* p, int64_t g0) const { return expand(p, g0, quad_full, quad_idx); }

 private:
  static __m512i widen_index(__m512i group) {
    return kScale == 0 ? _mm512_slli_epi32(group, 16) : kScale == 1 ? _mm512_castsi256_si512(_mm512_cvtepi32_epi16(group)) : group;
  }
  static __m512 expand(const uint8_t* p, int64_t g0, __mmask16 m, __m512i index) {
    if (kScale == 2) return _mm512_permutexvar_ps(index, _mm512_maskz_loadu_ps(m, p + 4 * g0));
    const __m512i v = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(m, p + 2 * g0));
    if (kScale == 0) return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAA, index, v));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(index, v)));
  }
};

inline __mmask64 tail_mask(int64_t bytes) { return bytes >= 64 ? ~__mmask64(0) : (__mmask64(1) << bytes) - 1; }

// The weights of one chunk as vpdpbusd's unsigned operands: 4-bit, 64 packed bytes -> the low nibbles
// (even columns) and the high nibbles (odd columns); 8-bit, the 64 bytes as they are.
template <int kBits>
struct ChunkWeights {
  __m512i lo, hi;
  explicit ChunkWeights(__m512i b) {
    if (kBits == 4) {
      asm("" : "+v"(b));  // one load, not one per unpacking instruction (see quad_sums)
      const __m512i low = _mm512_set1_epi8(0x0F);
      lo = _mm512_and_si512(b, low);
      hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), low);
    } else {
      lo = hi = b;
    }
  }
  // acc + the products with one activation plane (cc bytes at x) in int32 lanes.
  __m512i dot(__m512i acc, const int8_t* x) const {
    acc = _mm512_dpbusd_epi32(acc, lo, _mm512_loadu_si512(x));
    return kBits == 4 ? _mm512_dpbusd_epi32(acc, hi, _mm512_loadu_si512(x + 64)) : acc;
  }
};

// Σ_j d_j I_j per lane for one chunk; with more planes I = Σ_p 128^(planes-1-p) · I_p, exact in int32 (a
// lane sums at most 8 products of 15 · 2080768, or 4 of 255 · 2080768 for 8-bit: below 2^31). The
// planes' sums are independent chains; only their combination is serial.
template <int kBits, int kPlanes>
inline __m512 chunk(const ChunkWeights<kBits>& cw, const int8_t* xk, const float* dl) {
  __m512i dot = cw.dot(_mm512_setzero_si512(), xk);
  for (int p = 1; p < kPlanes; ++p)
    dot = _mm512_add_epi32(_mm512_slli_epi32(dot, 7), cw.dot(_mm512_setzero_si512(), xk + p * chunk_cols(kBits)));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_loadu_ps(dl));
}

// Σ_p 128^(planes-1-p) I_p for four whole 4-bit chunks (a quad), each block's four lanes summed: lane
// 4L + i holds block L of chunk i. The planes accumulate Horner-wise in one register per chunk, and
// the reduction (a 4x4 transpose of lane groups, with adds) leaves the float work a quarter of the lanes
// it would have per chunk.
template <int kPlanes>
__attribute__((always_inline)) inline __m512i quad_sums(const uint8_t* q, const int8_t* xk) {
  __m512i lo[4], hi[4], d[4];
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    __m512i b = _mm512_loadu_si512(q + 64 * j);
    // Keep the load a load: folded into both unpacking instructions, it reads each weight line twice
    // (measured 20 % slower for int24).
    asm("" : "+v"(b));
    lo[j] = _mm512_and_si512(b, low);
    hi[j] = _mm512_and_si512(_mm512_srli_epi16(b, 4), low);
    d[j] = _mm512_setzero_si512();
  }
  for (int p = 0; p < kPlanes; ++p) {  // the four chunks' chains interleaved
    for (int j = 0; j < 4; ++j)
      d[j] = _mm512_dpbusd_epi32(p ? _mm512_slli_epi32(d[j], 7) : d[j], lo[j], _mm512_loadu_si512(xk + (j * kPlanes + p) * 128));
    for (int j = 0; j < 4; ++j) d[j] = _mm512_dpbusd_epi32(d[j], hi[j], _mm512_loadu_si512(xk + (j * kPlanes + p) * 128 + 64));
  }
  const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]), _mm512_unpackhi_epi32(d[0], d[1]));
  const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]), _mm512_unpackhi_epi32(d[2], d[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// One row (decode): 4-bit rows a quad at a time, then chunks two at a time into two accumulators, then
// a masked last chunk; the bias term joins through the group vectors, so there is one horizontal sum per
// row.
template <int kBits, int kPlanes, int kScale>
inline float dot_vnni(const LaneScales<kScale>& scales, const LinearWeight& w, const Row& row, const Int8Input& in, int t) {
  const int gs = in.gshift;
  const int64_t cc = chunk_cols(kBits), cb = cc * kBits / 8;  // columns and weight bytes per chunk
  const int64_t chunks = in.chunks, row_bytes = w.cols * kBits / 8, full = row_bytes / cb;
  const int8_t* xk = in.qk.data() + size_t(t) * size_t(in.kstride);
  const float* dl = in.dlane.data() + size_t(t) * size_t(chunks) * 16;
  const uint8_t* q = row.data;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t c = 0;
  if (kBits == 4) {
    const float* dq = in.dquad.data() + size_t(t) * size_t(in.quads) * 16;
    for (; c + 4 <= full; c += 4) {
      prefetch_weights(q + c * cb, 4);
      const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(quad_sums<kPlanes>(q + c * cb, xk + c * cc * kPlanes)), _mm512_loadu_ps(dq + 4 * c));
      acc0 = _mm512_fmadd_ps(f, scales.quad(row.scales, (c * cc) >> gs), acc0);
    }
  }
  for (; c + 2 <= full; c += 2) {
    prefetch_weights(q + c * cb, 2);
    const ChunkWeights<kBits> w0(_mm512_loadu_si512(q + c * cb)), w1(_mm512_loadu_si512(q + (c + 1) * cb));
    acc0 = _mm512_fmadd_ps(chunk<kBits, kPlanes>(w0, xk + c * cc * kPlanes, dl + c * 16),
                           scales(row.scales, (c * cc) >> gs, true), acc0);
    acc1 = _mm512_fmadd_ps(chunk<kBits, kPlanes>(w1, xk + (c + 1) * cc * kPlanes, dl + (c + 1) * 16),
                           scales(row.scales, ((c + 1) * cc) >> gs, true), acc1);
  }
  for (; c < chunks; ++c) {
    const ChunkWeights<kBits> wc(_mm512_maskz_loadu_epi8(tail_mask(row_bytes - c * cb), q + c * cb));
    acc0 = _mm512_fmadd_ps(chunk<kBits, kPlanes>(wc, xk + c * cc * kPlanes, dl + c * 16),
                           scales(row.scales, (c * cc) >> gs), acc0);
  }
  const float* bs = in.bsum.data() + size_t(t) * size_t(in.gstride);
  for (int64_t i = 0; i < scales.groups; i += 16)
    acc1 = _mm512_fmadd_ps(load16_f32<kScale>(row.biases, i, first_n(scales.groups - i)), _mm512_loadu_ps(bs + i), acc1);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// Prefill: R rows (their weights unpacked to one byte each, in kernel order) against one block of 16
// packed tokens. For each 32-column block: 8 vpdpbusd per row and plane, each broadcasting 4 weights
// against the 16 tokens' 4 activations; then the block's int32 sums, scaled by the tokens' d and the
// row's group scale, join the row's fp32 sums. The rows' bytes are wstride apart; in.block_xoff and
// in.block_woff say where each block's columns are. One or two planes (int8, int16): a block's int32 sum
// of 32 products holds 128·I_h + I_l (at most 32 · 255 · 16320 for 8-bit).
template <int kBits, int kPlanes, int R>
void tile_vnni(const uint8_t* wb, int64_t wstride, const float* s, const float* bx, const Int8Input& in, int64_t tb, float* y,
               int64_t ldy, int64_t r0) {
  const int64_t plane_dwords = chunk_cols(kBits) / 4, kd = in.kstride / 4;
  const int32_t* tok = in.packed.data() + tb * kd * 16;
  const float* dt = in.packed_d.data() + tb * in.blocks * 16;
  const int32_t* xoff = in.block_xoff.data();
  const int32_t* woff = in.block_woff.data();
  __m512 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  static_assert(kPlanes <= 2, "three planes (int24) have no prefill tiles: CpuBackend prefills int24 in fp32");
  for (int64_t j = 0; j < in.blocks; ++j) {
    __m512i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
    for (int plane = 0; plane < kPlanes; ++plane) {
      if (plane == 1)
        for (int r = 0; r < R; ++r) acc[r] = _mm512_slli_epi32(acc[r], 7);
      for (int i = 0; i < 8; ++i) {
        const __m512i x = _mm512_loadu_si512(tok + (xoff[j * 8 + i] + plane * plane_dwords) * 16);
        for (int r = 0; r < R; ++r) {
          int32_t w4;
          std::memcpy(&w4, wb + r * wstride + woff[j * 8 + i], 4);
          acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(w4), x);
        }
      }
    }
    const __m512 d = _mm512_loadu_ps(dt + j * 16);
    const int64_t g = (j * kBlock) >> in.gshift;
    for (int r = 0; r < R; ++r)
      total[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[r]), d), _mm512_set1_ps(s[r * in.gstride + g]), total[r]);
  }
  const float* bt = in.packed_bsum.data() + tb * in.gstride * 16;
  for (int64_t g = 0; g < in.gstride; ++g) {
    const __m512 b = _mm512_loadu_ps(bt + g * 16);
    for (int r = 0; r < R; ++r) total[r] = _mm512_fmadd_ps(_mm512_set1_ps(bx[r * in.gstride + g]), b, total[r]);
  }
  const int tokens = int(std::min<int64_t>(16, in.n - tb * 16));
  for (int r = 0; r < R; ++r) {
    alignas(64) float out[16];
    _mm512_store_ps(out, total[r]);
    for (int t = 0; t < tokens; ++t) y[size_t(tb * 16 + t) * size_t(ldy) + size_t(r0 + r)] = out[t];
  }
}

template <int kBits, int kPlanes>
void gemm_vnni(const LinearWeight& w, int64_t expert, int64_t r0, int nr, const Int8Input& in, float* y, int64_t ldy) {
  const int64_t cc = chunk_cols(kBits), cb = cc * kBits / 8, chunks = in.chunks, groups = w.cols / w.group_size;
  const int64_t row_bytes = int64_t(w.row_bytes()), full = row_bytes / cb, wstride = chunks * cc;
  // Per thread, reused across calls: the rows' bytes in kernel order, and their scales and biases
  // (zero-padded to gstride).
  thread_local std::vector<uint8_t> wbytes;
  thread_local std::vector<float> sb;
  wbytes.resize(size_t(nr * wstride));
  sb.assign(size_t(2 * nr * in.gstride), 0.f);
  float* s = sb.data();
  float* bx = s + nr * in.gstride;
  for (int r = 0; r < nr; ++r) {
    const Row row = row_of(w, expert, r0 + r);
    to_f32(row.scales, w.scale_dtype, groups, s + r * in.gstride);
    to_f32(row.biases, w.scale_dtype, groups, bx + r * in.gstride);
    for (int64_t c = 0; c < chunks; ++c) {
      const ChunkWeights<kBits> cw(c < full ? _mm512_loadu_si512(row.data + c * cb)
                                            : _mm512_maskz_loadu_epi8(tail_mask(row_bytes - c * cb), row.data + c * cb));
      _mm512_storeu_si512(wbytes.data() + r * wstride + c * cc, cw.lo);
      if (kBits == 4) _mm512_storeu_si512(wbytes.data() + r * wstride + c * cc + 64, cw.hi);
    }
  }
  const int64_t tblocks = (in.n + 15) / 16;
  for (int64_t tb = 0; tb < tblocks; ++tb) {
    switch (nr) {
      case 8: tile_vnni<kBits, kPlanes, 8>(wbytes.data(), wstride, s, bx, in, tb, y, ldy, r0); break;
      case 7: tile_vnni<kBits, kPlanes, 7>(wbytes.data(), wstride, s, bx, in, tb, y, ldy, r0); break;
      case 6: tile_vnni<kBits, kPlanes, 6>(wbytes.data(), wstride, s, bx, in, tb, y, ldy, r0); break;
      case 5: tile_vnni<kBits, kPlanes, 5>(wbytes.data(), wstride, s, bx, in, tb, y, ldy, r0); break;
      case 4: tile_vnni<kBits, kPlanes, 4>(wbytes.data(), wstride, s, bx, in, tb, y, ldy, r0); break;
      case 3: tile_vnni<kBits, kPlanes, 3>(wbytes.data(), wstride, s, bx, in, tb, y, ldy, r0); break;
      case 2: tile_vnni<kBits, kPlanes, 2>(wbytes.data(), wstride, s, bx, in, tb, y, ldy, r0); break;
      case 1: tile_vnni<kBits, kPlanes, 1>(wbytes.data(), wstride, s, bx, in, tb, y, ldy, r0); break;
      default: break;
    }
  }
}
#endif  // MOELENS_I8_VNNI

#if MOELENS_I8_AVX2 && !MOELENS_I8_VNNI
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 4-bit: per 64 columns (32 packed bytes), maddubs of the low nibbles with the even activations and of
// the high nibbles with the odd ones (at most 2·15·127 per int16 pair, no saturation), madd to int32.
// Lanes 0-3 sum block 4c+2h, lanes 4-7 block 4c+2h+1: the first or second half of the chunk's dlane.
// More planes: Σ_p 128^(planes-1-p) · (plane p's sum), exact in int32 (8 products per lane).
template <int kPlanes>
float dot_q4_avx2(const LinearWeight& w, const Row& row, const Int8Input& in, int t) {
  const RowScales rs(w, row);
  const int g = w.group_size;
  const int64_t cols = w.cols;
  const int8_t* xk = in.qk.data() + size_t(t) * size_t(in.kstride);
  const float* dl = in.dlane.data() + size_t(t) * size_t(in.chunks) * 16;
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const __m256i idx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t c = 0; c < in.chunks; ++c)
    for (int h = 0; h < 2; ++h) {
      const int64_t col0 = c * 128 + 64 * h;
      if (col0 >= cols) break;
      const int64_t bytes = std::min<int64_t>(32, (cols - col0) / 2);
      __m256i b;
      if (bytes == 32) {
        b = load256(row.data + col0 / 2);
      } else {
        alignas(32) uint8_t part[32] = {};
        std::memcpy(part, row.data + col0 / 2, size_t(bytes));
        b = load256(part);
      }
      const __m256i lo = _mm256_and_si256(b, low), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low);
      auto plane = [&](const int8_t* x) {
        return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, load256(x)), _mm256_maddubs_epi16(hi, load256(x + 64))), ones);
      };
      const int8_t* x = xk + c * 128 * kPlanes + 32 * h;
      __m256i dot = plane(x);
      for (int p = 1; p < kPlanes; ++p) dot = _mm256_add_epi32(_mm256_slli_epi32(dot, 7), plane(x + 128 * p));
      const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_loadu_ps(dl + c * 16 + 8 * h));
      const __m256 s = g >= 64 ? _mm256_set1_ps(rs.s[col0 >> in.gshift])
                               : _mm256_permutevar8x32_ps(_mm256_loadu_ps(rs.s + (col0 >> in.gshift)), idx);
      if (h) acc1 = _mm256_fmadd_ps(f, s, acc1);
      else acc0 = _mm256_fmadd_ps(f, s, acc0);
    }
  const float* bs = in.bsum.data() + size_t(t) * size_t(in.gstride);
  for (int64_t i = 0; i < in.gstride; i += 8) acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(rs.b + i), _mm256_loadu_ps(bs + i), acc1);
  return hsum8(_mm256_add_ps(acc0, acc1));
}

// 8-bit: weights up to 255 would saturate maddubs's int16 pairs (2·255·127 > 32767), so both sides
// widen to int16 and madd (vpmaddwd) sums pairs into int32 exactly (the top two planes combine first:
// 128·high + next, within ±16320, still fits int16; a third plane joins in int32, 4 products per lane
// of at most 255 · 2080768). One 32-column block per step.
template <int kPlanes>
float dot_q8_avx2(const LinearWeight& w, const Row& row, const Int8Input& in, int t) {
  const RowScales rs(w, row);
  const int8_t* xk = in.qk.data() + size_t(t) * size_t(in.kstride);
  const float* d = in.d.data() + size_t(t) * size_t(in.blocks);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  auto i128 = [](const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); };
  auto act16 = [&](const int8_t* x) {  // 16 activations as int16, from the top plane or two (64 bytes apart)
    __m256i v = _mm256_cvtepi8_epi16(i128(x));
    return kPlanes >= 2 ? _mm256_add_epi16(_mm256_slli_epi16(v, 7), _mm256_cvtepi8_epi16(i128(x + 64))) : v;
  };
  for (int64_t j = 0; j < in.blocks; ++j) {
    const uint8_t* q = row.data + j * kBlock;
    const int8_t* x = xk + (j / 2) * 64 * kPlanes + (j % 2) * kBlock;  // chunks of 64 columns per plane
    const __m256i w0 = _mm256_cvtepu8_epi16(i128(q)), w1 = _mm256_cvtepu8_epi16(i128(q + 16));
    __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(w0, act16(x)), _mm256_madd_epi16(w1, act16(x + 16)));
    if (kPlanes == 3)
      dot = _mm256_add_epi32(_mm256_slli_epi32(dot, 7),
                             _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_cvtepi8_epi16(i128(x + 128))),
                                              _mm256_madd_epi16(w1, _mm256_cvtepi8_epi16(i128(x + 144)))));
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d[j]));
    const __m256 s = _mm256_set1_ps(rs.s[(j * kBlock) >> in.gshift]);
    if (j & 1) acc1 = _mm256_fmadd_ps(f, s, acc1);
    else acc0 = _mm256_fmadd_ps(f, s, acc0);
  }
  const float* bs = in.bsum.data() + size_t(t) * size_t(in.gstride);
  for (int64_t i = 0; i < in.gstride; i += 8) acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(rs.b + i), _mm256_loadu_ps(bs + i), acc1);
  return hsum8(_mm256_add_ps(acc0, acc1));
}
#endif

#if MOELENS_I8_NEON
// 4-bit: per 32-column block, 16 packed bytes: the low nibbles (even columns) against the block's 16
// even activations, the high nibbles (odd columns) against the 16 odd ones (kernel order), as signed
// bytes (weights 0..15). With the dot-product extension, sdot; without it, vmull/vmlal into int16
// (4 products of at most 15·127 per lane) and a widening horizontal add.
inline int32_t block_q4_neon(uint8x16_t b, const int8_t* xe, const int8_t* xo) {
  const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F)));
  const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
  const int8x16_t e = vld1q_s8(xe), o = vld1q_s8(xo);
#if defined(__ARM_FEATURE_DOTPROD)
  return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, e), hi, o));
#else
  int16x8_t p = vmull_s8(vget_low_s8(lo), vget_low_s8(e));
  p = vmlal_high_s8(p, lo, e);
  p = vmlal_s8(p, vget_low_s8(hi), vget_low_s8(o));
  p = vmlal_high_s8(p, hi, o);
  return vaddlvq_s16(p);
#endif
}

// 8-bit: weights up to 255 do not fit a signed byte, so both sides widen to int16 (the top two planes
// combine there, 128·high + next within ±16320) and multiply-accumulate into int32. A third plane is
// summed on its own by the caller (32 products of 255 · 2080768 overflow int32).
template <int kPlanes>
inline int32_t block_q8_neon(const uint8_t* q, const int8_t* x) {
  int32x4_t acc = vdupq_n_s32(0);
  for (int h = 0; h < 32; h += 16) {
    const uint8x16_t w = vld1q_u8(q + h);
    const int8x16_t v = vld1q_s8(x + h);
    int16x8_t xl = vmovl_s8(vget_low_s8(v)), xh = vmovl_high_s8(v);
    if (kPlanes >= 2) {
      const int8x16_t l = vld1q_s8(x + h + 64);
      xl = vaddq_s16(vshlq_n_s16(xl, 7), vmovl_s8(vget_low_s8(l)));
      xh = vaddq_s16(vshlq_n_s16(xh, 7), vmovl_high_s8(l));
    }
    const int16x8_t wl = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(w))), wh = vreinterpretq_s16_u16(vmovl_high_u8(w));
    acc = vmlal_s16(acc, vget_low_s16(wl), vget_low_s16(xl));
    acc = vmlal_high_s16(acc, wl, xl);
    acc = vmlal_s16(acc, vget_low_s16(wh), vget_low_s16(xh));
    acc = vmlal_high_s16(acc, wh, xh);
  }
  return vaddvq_s32(acc);
}

// One row: the integer sum of each block as above, then the reference's fp32 arithmetic per group.
template <int kBits, int kPlanes>
float dot_neon(const LinearWeight& w, const Row& row, const Int8Input& in, int t) {
  const int64_t cc = chunk_cols(kBits), per_chunk = cc / kBlock, per_group = w.group_size / kBlock;
  const int8_t* xk = in.qk.data() + size_t(t) * size_t(in.kstride);
  const float* d = in.d.data() + size_t(t) * size_t(in.blocks);
  const float* bs = in.bsum.data() + size_t(t) * size_t(in.gstride);
  float acc = 0.f, sg = 0.f;
  for (int64_t j = 0; j < in.blocks; ++j) {
    const int64_t c = j / per_chunk, jj = j % per_chunk;
    const int8_t* x = xk + c * cc * kPlanes;  // the chunk's plane 0
    float dot;
    if (kBits == 4) {  // 32 products of 15 · 2080768 at most: int32 holds every plane
      const uint8x16_t b = vld1q_u8(row.data + j * 16);
      int32_t sum = block_q4_neon(b, x + 16 * jj, x + 64 + 16 * jj);
      for (int p = 1; p < kPlanes; ++p) sum = 128 * sum + block_q4_neon(b, x + p * cc + 16 * jj, x + p * cc + 64 + 16 * jj);
      dot = float(sum);
    } else {
      dot = float(block_q8_neon<kPlanes>(row.data + j * kBlock, x + kBlock * jj));
      if (kPlanes == 3) dot = 128.f * dot + float(block_q8_neon<1>(row.data + j * kBlock, x + 2 * cc + kBlock * jj));
    }
    sg += d[j] * dot;
    if ((j + 1) % per_group == 0) {
      const int64_t G = j / per_group;
      acc += load_float(row.scales, w.scale_dtype, size_t(G)) * sg + load_float(row.biases, w.scale_dtype, size_t(G)) * bs[G];
      sg = 0.f;
    }
  }
  return acc;
}
#endif

#if MOELENS_I8_VNNI
template <int kBits, int kPlanes, int kScale>
void rows_vnni(const LinearWeight& w, int64_t expert, int64_t r0, int64_t r1, const Int8Input& in, int t, float* y) {
  const LaneScales<kScale> scales(in);
  for (int64_t r = r0; r < r1; ++r) y[r - r0] = dot_vnni<kBits, kPlanes, kScale>(scales, w, row_of(w, expert, r), in, t);
}
#endif

// Rows r0 .. r1-1 with this build's row kernel for one layout, chosen once for all of them.
template <int kBits, int kPlanes>
void rows_kernel(const LinearWeight& w, int64_t expert, int64_t r0, int64_t r1, const Int8Input& in, int t, float* y) {
#if MOELENS_I8_VNNI
  switch (scale_kind(w.scale_dtype)) {
    case 0: return rows_vnni<kBits, kPlanes, 0>(w, expert, r0, r1, in, t, y);
    case 1: return rows_vnni<kBits, kPlanes, 1>(w, expert, r0, r1, in, t, y);
    default: return rows_vnni<kBits, kPlanes, 2>(w, expert, r0, r1, in, t, y);
  }
#else
  for (int64_t r = r0; r < r1; ++r) {
    const Row row = row_of(w, expert, r);
#if MOELENS_I8_AVX2
    y[r - r0] = kBits == 4 ? dot_q4_avx2<kPlanes>(w, row, in, t) : dot_q8_avx2<kPlanes>(w, row, in, t);
#elif MOELENS_I8_NEON
    y[r - r0] = dot_neon<kBits, kPlanes>(w, row, in, t);
#else
    y[r - r0] = dot_row_int8_reference(w, row, in, t);
#endif
  }
#endif
}

template <int kBits>
void rows_kernel_planes(const LinearWeight& w, int64_t expert, int64_t r0, int64_t r1, const Int8Input& in, int t, float* y) {
  if (in.planes == 3) return rows_kernel<kBits, 3>(w, expert, r0, r1, in, t, y);
  if (in.planes == 2) return rows_kernel<kBits, 2>(w, expert, r0, r1, in, t, y);
  return rows_kernel<kBits, 1>(w, expert, r0, r1, in, t, y);
}

}  // namespace

void dot_rows_int8(const LinearWeight& w, int64_t expert, int64_t r0, int64_t r1, const Int8Input& in, float* y, int t) {
  if (w.bits == 4) return rows_kernel_planes<4>(w, expert, r0, r1, in, t, y);
  return rows_kernel_planes<8>(w, expert, r0, r1, in, t, y);
}

void gemm_int8(const LinearWeight& w, int64_t expert, int64_t r0, int nr, const Int8Input& in, float* y, int64_t ldy) {
#if MOELENS_I8_VNNI
  if (in.tiled()) {  // packed tokens
    if (nr > 8) {  // the tiles hold at most 8 rows
      for (int r = 0; r < nr; r += 8) gemm_int8(w, expert, r0 + r, std::min(8, nr - r), in, y, ldy);
      return;
    }
    const bool two = in.planes == 2;
    if (w.bits == 4) return two ? gemm_vnni<4, 2>(w, expert, r0, nr, in, y, ldy) : gemm_vnni<4, 1>(w, expert, r0, nr, in, y, ldy);
    return two ? gemm_vnni<8, 2>(w, expert, r0, nr, in, y, ldy) : gemm_vnni<8, 1>(w, expert, r0, nr, in, y, ldy);
  }
#endif
  // The row kernel per token: the rows (a few KiB) stay in L1 across the tokens.
  for (int t = 0; t < in.n; ++t) dot_rows_int8(w, expert, r0, r0 + nr, in, y + size_t(t) * size_t(ldy) + size_t(r0), t);
}

}  // namespace moelens::cpu
