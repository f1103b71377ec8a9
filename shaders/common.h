// Helpers shared by the kernels: scalar decoding of stored weights and the fused dequantising dot
// product (fp32 accumulation) that every GEMV-class kernel uses.
#ifndef MOELENS_SHADER_COMMON_H
#define MOELENS_SHADER_COMMON_H

#include "params.h"

// MIN_RESIDENT_THREADGROUPS(n), between a kernel's [[max_total_threads_per_threadgroup(N)]] and
// `kernel`: with CUDA, at least n of its threadgroups resident per multiprocessor (__launch_bounds__'
// second argument), which caps its registers per thread. Metal sizes registers from the attribute alone.
#if defined(__METAL_VERSION__)
#define MIN_RESIDENT_THREADGROUPS(n)
#endif

// await_inputs(): where a kernel that calls it starts to read what earlier launches wrote; before it,
// only reads of the model's weights and prefetch_l2 hints (no writes). A kernel that does not call it
// waits before its first statement. With CUDA a kernel's blocks may start while the previous kernel
// runs (programmatic dependent launch), so the weight ranges it asks for before waiting are on their
// way into L2 meanwhile. prefetch_l2(p, bytes): a hint that [p, p + bytes) is read soon. Both are
// CUDA's (native/backends/gpu/msl/msl.h); Metal runs kernels in order and does neither.
#if defined(__METAL_VERSION__)
inline void await_inputs() {}
inline void prefetch_l2(device const void*, ulong) {}
#endif

inline float bf16_bits_to_float(ushort bits) { return as_type<float>(uint(bits) << 16); }
inline float f16_bits_to_float(ushort bits) { return float(as_type<half>(bits)); }

inline float silu(float x) { return x / (1.0f + exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// Element g of a row of scales or biases stored as bf16, f16 or f32. `row` is 4-byte aligned (the
// backend pads scale rows to 4 bytes), so one unconditional 4-byte load serves every type: kernels
// keep their loads free of branches so that a thread's loads are in flight together.
// The two halves of it: the 4-byte word that holds element g, and the element from that word (apart,
// the word can be loaded a K-step ahead of its use: shaders/tiles.h).
inline uint scale_word(uint g, uint type) { return type == SCALE_F32 ? g : g >> 1u; }
// The bits of group g's 16-bit scale in the word that holds it (two to a word, the even group low).
inline uint scale_bits16(uint word, uint g) { return (g & 1u) != 0u ? word >> 16 : word & 0xffffu; }
inline float scale_in_word(uint word, uint g, uint type) {
  const uint half_bits = scale_bits16(word, g);
  const float from16 = type == SCALE_BF16 ? as_type<float>(half_bits << 16) : float(as_type<half>(ushort(half_bits)));
  return type == SCALE_F32 ? as_type<float>(word) : from16;
}
inline uint load_scale_word(device const uchar* row, uint g, uint type) {
  return ((device const uint*)row)[scale_word(g, type)];
}
inline float load_scale(device const uchar* row, uint g, uint type) {
  return scale_in_word(load_scale_word(row, g, type), g, type);
}

// Element i of a dense row stored as bf16, f16 or f32 (embedding rows).
inline float load_dense(device const uchar* row, uint i, uint format) {
  if (format == WEIGHT_F32) return ((device const float*)row)[i];
  ushort bits = ((device const ushort*)row)[i];
  return format == WEIGHT_BF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
}

// q as a float without an int-to-float conversion (those are quarter rate on NVIDIA GPUs): the bits
// 0x4B000000 | q are the float 2^23 + q, exactly, for q < 2^23.
inline float unpack(uint word, uint shift, uint mask) {
  return as_type<float>(((word >> shift) & mask) | 0x4B000000u) - 8388608.0f;
}

// x[col .. col+3] (col a multiple of 4), in one 16-byte load when x is 16-byte aligned (`vec`).
inline void load_x4(device const float* x, uint col, bool vec, thread float& a, thread float& b, thread float& c,
                    thread float& d) {
  if (vec) {
    const float4 v = ((device const float4*)x)[col / 4u];
    a = v.x;
    b = v.y;
    c = v.z;
    d = v.w;
  } else {
    a = x[col];
    b = x[col + 1u];
    c = x[col + 2u];
    d = x[col + 3u];
  }
}

// Σ q·x over one 4-byte word of quantized weights: 8 nibbles against a..h (q4), or 4 bytes against a..d.
inline float word_dot(bool q4, uint v, float a, float b, float c, float d, float e, float f, float g, float h) {
  return q4 ? unpack(v, 0u, 15u) * a + unpack(v, 4u, 15u) * b + unpack(v, 8u, 15u) * c + unpack(v, 12u, 15u) * d +
                  unpack(v, 16u, 15u) * e + unpack(v, 20u, 15u) * f + unpack(v, 24u, 15u) * g + unpack(v, 28u, 15u) * h
            : unpack(v, 0u, 255u) * a + unpack(v, 8u, 255u) * b + unpack(v, 16u, 255u) * c + unpack(v, 24u, 255u) * d;
}

// The addresses of a block of GEMV_ROWS rows from row0 (rows past count clamped to the last: their
// products are not stored): the weights' bytes, and the rows of bf16 scales and biases.
struct AffineRows {
  device const uchar* q[GEMV_ROWS];
  device const ushort* s[GEMV_ROWS];
  device const ushort* b[GEMV_ROWS];
};
inline AffineRows affine_rows(constant WeightDesc& w, device const uchar* data, device const uchar* scales,
                              device const uchar* biases, uint row0, uint count) {
  AffineRows rows;
  for (uint r = 0; r < GEMV_ROWS; ++r) {
    const ulong row = ulong(row0 + min(r, count - 1u));
    rows.q[r] = data + row * w.row_bytes;
    rows.s[r] = (device const ushort*)(scales + row * w.scale_row_bytes);
    rows.b[r] = (device const ushort*)(biases + row * w.scale_row_bytes);
  }
  return rows;
}

// A hint that rows row0 .. row0 + count - 1 of a matrix are read next (prefetch_l2): lane 0 asks for
// their bytes, lanes 1 and 2 for their scales and biases when quantized; each is one contiguous range.
inline void prefetch_rows(constant WeightDesc& w, device const uchar* data, device const uchar* scales,
                          device const uchar* biases, uint row0, uint count, uint lane) {
  const bool quantized = w.format == WEIGHT_Q4 || w.format == WEIGHT_Q8;
  if (lane == 0u) prefetch_l2(data + ulong(row0) * w.row_bytes, ulong(count) * w.row_bytes);
  if (lane == 1u && quantized) prefetch_l2(scales + ulong(row0) * w.scale_row_bytes, ulong(count) * w.scale_row_bytes);
  if (lane == 2u && quantized) prefetch_l2(biases + ulong(row0) * w.scale_row_bytes, ulong(count) * w.scale_row_bytes);
}

// rows_dot (below) for MLX affine weights (4-bit when Q4, else 8-bit) with bf16 scales and biases and
// 16-byte aligned x, the checkpoints' form: the same products and sums in the same order, with the
// rows' addresses taken once and no format or scale-type switches per word (the GEMV is bound by
// instruction issue: fewer instructions per weight are what makes it faster).
template <bool Q4>
inline void rows_dot_affine_bf16(constant WeightDesc& w, device const uchar* data, device const uchar* scales,
                                 device const uchar* biases, uint row0, uint count, device const float* x, uint lane,
                                 uint part, uint parts, thread float* acc) {
  const uint words = w.row_bytes / 4u, step = 32u * parts;
  const AffineRows rows = affine_rows(w, data, scales, biases, row0, count);
  device const float4* x4 = (device const float4*)x;
  for (uint w0 = 32u * part + lane; w0 < words; w0 += step * GEMV_UNROLL) {
    uint q[GEMV_UNROLL][GEMV_ROWS];
    float sc[GEMV_UNROLL][GEMV_ROWS], bi[GEMV_UNROLL][GEMV_ROWS];
    for (uint u = 0; u < GEMV_UNROLL; ++u) {
      const uint wi = min(w0 + step * u, words - 1u), group = wi >> w.group_shift;
      for (uint r = 0; r < GEMV_ROWS; ++r) {
        q[u][r] = ((device const uint*)rows.q[r])[wi];
        sc[u][r] = bf16_bits_to_float(rows.s[r][group]);
        bi[u][r] = bf16_bits_to_float(rows.b[r][group]);
      }
    }
    for (uint u = 0; u < GEMV_UNROLL; ++u) {
      const uint wi = min(w0 + step * u, words - 1u);
      const bool in = w0 + step * u < words;
      const float4 lo = x4[Q4 ? 2u * wi : wi], hi = x4[Q4 ? 2u * wi + 1u : wi];  // Q8: a harmless reload
      const float xs = Q4 ? ((lo.x + lo.y) + (lo.z + lo.w)) + ((hi.x + hi.y) + (hi.z + hi.w)) : (lo.x + lo.y) + (lo.z + lo.w);
      for (uint r = 0; r < GEMV_ROWS; ++r) {
        const float qx = word_dot(Q4, q[u][r], lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
        acc[r] += in ? sc[u][r] * qx + bi[u][r] * xs : 0.0f;
      }
    }
  }
}

// acc[r] = this simdgroup's share of W[row0 + r] · x, for r < count (at most GEMV_ROWS rows of one
// matrix or expert, `data`, `scales` and `biases` pointing at it); the caller sums the lanes
// (simd_sum) and, when `parts` simdgroups share the rows (split-K), the parts. Lane l of part p takes
// 4-byte words 32p + l, then 32·parts further, of every row, so each row load of the simdgroup is
// 128 contiguous bytes; GEMV_UNROLL words per row are loaded before any
// is used (loads in flight are what a GEMV needs; bench/gpu/gemv-variants.cu measured the choices),
// and the x values of a word serve all the rows. A quantized word lies inside one group (group sizes
// are multiples of 32), so it costs scale·Σq·x + bias·Σx, as MLX's qdot does. `vec`: x is 16-byte aligned.
inline void rows_dot(constant WeightDesc& w, device const uchar* data, device const uchar* scales,
                     device const uchar* biases, uint row0, uint count, device const float* x, bool vec, uint lane,
                     uint part, uint parts, thread float* acc) {
  for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] = 0.0f;
  const uint words = w.row_bytes / 4u;
  const bool q4 = w.format == WEIGHT_Q4;
  if (vec && w.scale_type == SCALE_BF16 && q4) {
    rows_dot_affine_bf16<true>(w, data, scales, biases, row0, count, x, lane, part, parts, acc);
  } else if (vec && w.scale_type == SCALE_BF16 && w.format == WEIGHT_Q8) {
    rows_dot_affine_bf16<false>(w, data, scales, biases, row0, count, x, lane, part, parts, acc);
  } else if (q4 || w.format == WEIGHT_Q8) {
    const uint per_word = q4 ? 8u : 4u;
    for (uint w0 = 32u * part + lane; w0 < words; w0 += 32u * parts * GEMV_UNROLL) {
      // Loads first, all unconditional (clamped to the last word and the last row; what they add is
      // masked), then the arithmetic.
      uint q[GEMV_UNROLL][GEMV_ROWS];
      float sc[GEMV_UNROLL][GEMV_ROWS], bi[GEMV_UNROLL][GEMV_ROWS];
      for (uint u = 0; u < GEMV_UNROLL; ++u) {
        const uint wi = min(w0 + 32u * parts * u, words - 1u), group = wi >> w.group_shift;
        for (uint r = 0; r < GEMV_ROWS; ++r) {
          const ulong row = ulong(row0 + min(r, count - 1u));
          q[u][r] = ((device const uint*)(data + row * w.row_bytes))[wi];
          sc[u][r] = load_scale(scales + row * w.scale_row_bytes, group, w.scale_type);
          bi[u][r] = load_scale(biases + row * w.scale_row_bytes, group, w.scale_type);
        }
      }
      for (uint u = 0; u < GEMV_UNROLL; ++u) {
        const uint wi = min(w0 + 32u * parts * u, words - 1u);
        const bool in = w0 + 32u * parts * u < words;
        float a, b, c, d, e, f, g, h;
        load_x4(x, per_word * wi, vec, a, b, c, d);
        load_x4(x, q4 ? 8u * wi + 4u : per_word * wi, vec, e, f, g, h);  // Q8: a harmless reload
        const float xs = q4 ? ((a + b) + (c + d)) + ((e + f) + (g + h)) : (a + b) + (c + d);
        for (uint r = 0; r < GEMV_ROWS; ++r) {
          const uint v = q[u][r];
          const float qx = word_dot(q4, v, a, b, c, d, e, f, g, h);
          acc[r] += in ? sc[u][r] * qx + bi[u][r] * xs : 0.0f;
        }
      }
    }
  } else if (w.format == WEIGHT_F32) {
    for (uint wi = 32u * part + lane; wi < words; wi += 32u * parts) {
      const float a = x[wi];
      for (uint r = 0; r < GEMV_ROWS; ++r)
        if (r < count) acc[r] += ((device const float*)(data + ulong(row0 + r) * w.row_bytes))[wi] * a;
    }
  } else {  // bf16 or f16: two weights per word
    const bool bf = w.format == WEIGHT_BF16;
    for (uint wi = 32u * part + lane; wi < words; wi += 32u * parts) {
      const float a = x[2u * wi], b = x[2u * wi + 1u];
      for (uint r = 0; r < GEMV_ROWS; ++r) {
        if (r < count) {
          const uint v = ((device const uint*)(data + ulong(row0 + r) * w.row_bytes))[wi];
          const ushort lo = ushort(v & 0xffffu), hi = ushort(v >> 16);
          acc[r] += (bf ? bf16_bits_to_float(lo) : f16_bits_to_float(lo)) * a +
                    (bf ? bf16_bits_to_float(hi) : f16_bits_to_float(hi)) * b;
        }
      }
    }
  }
}

// Rows quantised to int16 in blocks of INT16_BLOCK columns (shaders/params.h), one value per lane of a
// simdgroup for each block: d = max|v| / INT16_QMAX, q = round(v / d), half to even, within ±INT16_QMAX
// (NaN, and every q of an all-zero block, 0). q is stored per 8-column word as [q0|q2] [q4|q6] [q1|q3]
// [q5|q7] (word_dot_int16's order) in xq, and (d, d · Σq) as the pair de[2 block], de[2 block + 1].
inline int int16_of(float v, float d) {
  const float r = d > 0.0f ? rint(precise::divide(v, d)) : 0.0f;
  return r == r ? int(clamp(r, -INT16_QMAX, INT16_QMAX)) : 0;
}
inline void store_int16(int q, device ushort* xq, ulong block, uint lane) {
  const uint k = lane % 8u;
  xq[INT16_BLOCK * block + 8u * (lane / 8u) + 4u * (k % 2u) + k / 2u] = as_type<ushort>(short(q));
}
inline void store_int16_scale(float d, int sum, device float* de, ulong block) {
  de[2u * block] = d;
  de[2u * block + 1u] = d * float(sum);
}

// One block (every lane calls it): quantize_int16's.
inline void store_block_int16(float v, device ushort* xq, device float* de, ulong block, uint lane) {
  const float d = simd_max(abs(v)) / INT16_QMAX;
  const int q = int16_of(v, d), sum = simd_sum(q);
  store_int16(q, xq, block, lane);
  if (lane == 0u) store_int16_scale(d, sum, de, block);
}

// v[0..7] of 8 blocks reduced over the simdgroup (the maximum, or with SUM the sum) with 9 shuffles
// instead of 8 · 5: the lanes exchange halves of their set (xor 16, then 8, then 4), each keeping the
// blocks its bit selects, then combine the last block's partials (xor 2, 1). Lane l ends with the total
// of block (l / 4) % 8; lane 4b holds block b's.
template <class T, bool SUM>
inline T reduce_blocks8(thread const T* v, uint lane) {
  T a[4], b[2];
  const bool hi4 = (lane & 16u) != 0u, hi3 = (lane & 8u) != 0u, hi2 = (lane & 4u) != 0u;
  for (uint i = 0; i < 4u; ++i) {
    const T got = simd_shuffle_xor(hi4 ? v[i] : v[4u + i], ushort(16));
    a[i] = SUM ? (hi4 ? v[4u + i] : v[i]) + got : max(hi4 ? v[4u + i] : v[i], got);
  }
  for (uint i = 0; i < 2u; ++i) {
    const T got = simd_shuffle_xor(hi3 ? a[i] : a[2u + i], ushort(8));
    b[i] = SUM ? (hi3 ? a[2u + i] : a[i]) + got : max(hi3 ? a[2u + i] : a[i], got);
  }
  const T got = simd_shuffle_xor(hi2 ? b[0] : b[1], ushort(4));
  T c = SUM ? (hi2 ? b[1] : b[0]) + got : max(hi2 ? b[1] : b[0], got);
  for (ushort m = 2; m >= 1; m /= 2) {
    const T other = simd_shuffle_xor(c, m);
    c = SUM ? c + other : max(c, other);
  }
  return c;
}

// Eight blocks at once (the norm kernels': a thread's values k = 0..7 lie in 8 blocks): v[k] is this
// lane's value of block block[k], stored where live[k]. Their maxima and sums by reduce_blocks8, so
// that the step costs 26 shuffles instead of 80 on the norm's critical path.
inline void store_blocks8_int16(thread const float* v, thread const bool* live, thread const ulong* block,
                                device ushort* xq, device float* de, uint lane) {
  float a[8];
  for (uint k = 0; k < 8u; ++k) a[k] = abs(v[k]);
  const float m = reduce_blocks8<float, false>(a, lane);
  int q[8];
  float d[8];
  for (uint k = 0; k < 8u; ++k) {
    d[k] = simd_shuffle(m, ushort(4u * k)) / INT16_QMAX;
    q[k] = int16_of(v[k], d[k]);
  }
  const int sum = reduce_blocks8<int, true>(q, lane);
  for (uint k = 0; k < 8u; ++k) {
    if (!live[k]) continue;
    store_int16(q[k], xq, block[k], lane);
    if (lane == 4u * k) store_int16_scale(d[k], sum, de, block[k]);
  }
}

// Σ q_k · x_k + acc over the 8 columns of a 4-bit word q (column k in nibble k) and their int16
// activations x as quantize_int16 stores them: [x0|x2] [x4|x6] [x1|x3] [x5|x7], each pair the low half
// first. The low nibbles masked to bytes (columns 0, 2, 4, 6) meet x.x and x.y, the high ones x.z and x.w:
// with CUDA four dp2a instructions, elsewhere the same sums in plain integer arithmetic (exact either way).
inline int word_dot_int16(uint q, uint4 x, int acc) {
  const uint lo = q & 0x0F0F0F0Fu, hi = (q >> 4u) & 0x0F0F0F0Fu;
#if defined(MSL_TARGET_CUDA)
  acc = __dp2a_lo(int(x.x), int(lo), acc);
  acc = __dp2a_hi(int(x.y), int(lo), acc);
  acc = __dp2a_lo(int(x.z), int(hi), acc);
  return __dp2a_hi(int(x.w), int(hi), acc);
#else
  const uint xs[4] = {x.x, x.y, x.z, x.w};
  for (uint i = 0; i < 4u; ++i) {
    const uint w = i < 2u ? lo : hi, b = 16u * (i % 2u);
    acc += int(as_type<short>(ushort(xs[i] & 0xffffu))) * int((w >> b) & 0xffu) +
           int(as_type<short>(ushort(xs[i] >> 16u))) * int((w >> (b + 8u)) & 0xffu);
  }
  return acc;
#endif
}

// acc[r] = this simdgroup's share of W[row0 + r] · x̂ for r < count, as rows_dot, for 4-bit rows with bf16
// scales and biases (groups of 32 columns or more) and x̂ = d·q, one row of quantize_int16's output: `xq`
// its int16 words (4 uint4 per block of INT16_BLOCK columns) and `de` each block's (d, d · Σq). Lane l
// of part p takes blocks 32p + l, then 32·parts further: 16 bytes of each row, an integer sum over the
// block, then scale · d · Σq·w + bias · d · Σq, the CPU backend's int16 arithmetic (int8.h) in another
// order of the fp32 sums.
inline void rows_dot_int16(constant WeightDesc& w, device const uchar* data, device const uchar* scales,
                           device const uchar* biases, uint row0, uint count, device const uint4* xq,
                           device const float2* de, uint lane, uint part, uint parts, thread float* acc) {
  for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] = 0.0f;
  const uint blocks = w.cols / INT16_BLOCK, step = 32u * parts;
  const AffineRows rows = affine_rows(w, data, scales, biases, row0, count);
  for (uint j0 = 32u * part + lane; j0 < blocks; j0 += step * GEMV_UNROLL) {
    uint4 q[GEMV_UNROLL][GEMV_ROWS];
    float sc[GEMV_UNROLL][GEMV_ROWS], bi[GEMV_UNROLL][GEMV_ROWS];
    for (uint u = 0; u < GEMV_UNROLL; ++u) {  // loads first, clamped to the last block (masked below)
      const uint j = min(j0 + step * u, blocks - 1u), group = (4u * j) >> w.group_shift;
      for (uint r = 0; r < GEMV_ROWS; ++r) {
        const uint4 words = ((device const uint4*)rows.q[r])[j];  // (the strict address-space build copies device vectors by construction)
        q[u][r] = words;
        sc[u][r] = bf16_bits_to_float(rows.s[r][group]);
        bi[u][r] = bf16_bits_to_float(rows.b[r][group]);
      }
    }
    for (uint u = 0; u < GEMV_UNROLL; ++u) {
      const uint j = min(j0 + step * u, blocks - 1u);
      const bool in = j0 + step * u < blocks;
      const uint4 x0 = xq[4u * j], x1 = xq[4u * j + 1u], x2 = xq[4u * j + 2u], x3 = xq[4u * j + 3u];
      const float2 e = de[j];
      for (uint r = 0; r < GEMV_ROWS; ++r) {
        const int dot = word_dot_int16(q[u][r].w, x3, word_dot_int16(q[u][r].z, x2,
                        word_dot_int16(q[u][r].y, x1, word_dot_int16(q[u][r].x, x0, 0))));
        acc[r] += in ? sc[u][r] * (e.x * float(dot)) + bi[u][r] * e.y : 0.0f;
      }
    }
  }
}

// Split-K: `parts` consecutive simdgroups share a block of GEMV_ROWS rows, each holding its lanes'
// shares in acc. Returns row `lane`'s total on lanes < GEMV_ROWS of the block's first simdgroup (part
// 0), through `partial` (GEMV_SIMDGROUPS · GEMV_ROWS floats); 0 elsewhere. It has a barrier: every
// thread of the threadgroup calls it.
inline float block_rows_sum(thread const float* acc, threadgroup float* partial, uint sg, uint lane, uint parts) {
  for (uint r = 0; r < GEMV_ROWS; ++r) {
    const float v = simd_sum(acc[r]);
    if (lane == 0u) partial[sg * GEMV_ROWS + r] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0.0f;
  if (sg % parts == 0u && lane < GEMV_ROWS)
    for (uint q = 0; q < parts; ++q) total += partial[(sg + q) * GEMV_ROWS + lane];
  return total;
}

// Byte offset of expert e in a stack.
inline ulong expert_bytes(constant WeightDesc& w, uint e) { return ulong(e) * ulong(w.rows) * ulong(w.row_bytes); }
inline ulong expert_scale_bytes(constant WeightDesc& w, uint e) {
  return ulong(e) * ulong(w.rows) * ulong(w.scale_row_bytes);
}

// Sum of v over the threadgroup (threads = a multiple of 32, at most 1024), through `scratch` (32
// floats of threadgroup memory). Every thread gets the total. Begins and ends with a barrier so that
// `scratch` can be reused at once.
inline float threadgroup_sum(float v, threadgroup float* scratch, uint sg, uint lane, uint simdgroups) {
  float s = simd_sum(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) scratch[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0.0f;
  for (uint i = 0; i < simdgroups; ++i) total += scratch[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

// threadgroup_sum of two values at once, through `scratch` (64 floats): one set of barriers; each total
// the same as threadgroup_sum's.
inline float2 threadgroup_sum2(float a, float b, threadgroup float* scratch, uint sg, uint lane, uint simdgroups) {
  const float sa = simd_sum(a), sb = simd_sum(b);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) {
    scratch[sg] = sa;
    scratch[32u + sg] = sb;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float ta = 0.0f, tb = 0.0f;
  for (uint i = 0; i < simdgroups; ++i) {
    ta += scratch[i];
    tb += scratch[32u + i];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return float2(ta, tb);
}

// 16 bytes (4 words: a tile's run of 8 halfs, a float4 as_type<uint4>) into threadgroup memory at a
// 16-byte aligned dst: one 16-byte store with CUDA (nvcc does not merge the word stores); word by word
// elsewhere (the strict address-space build has no vector stores).
inline void store_words(threadgroup half* dst, uint4 words) {
#if defined(MSL_TARGET_CUDA)
  *(threadgroup uint4*)dst = words;
#else
  threadgroup uint* w = (threadgroup uint*)dst;
  w[0] = words.x;
  w[1] = words.y;
  w[2] = words.z;
  w[3] = words.w;
#endif
}
#endif
