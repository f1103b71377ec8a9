// The tiled prefill kernels' building blocks: stored weights dequantised and half activations
// (half_rows) copied into threadgroup tiles of half (the operands of the matrix units), a simdgroup's
// 32x32 block of products on simdgroup matrices with fp32 accumulation, and its epilogue through
// threadgroup memory. Tiles are [rows][k + GEMM_PAD] halfs for a K-step of k columns (GEMM_K, or
// GEMM_WIDE_K for gemm_wide); every loader is called by all threads of the threadgroup, each storing
// runs of 8 consecutive columns.
#ifndef MOELENS_SHADER_TILES_H
#define MOELENS_SHADER_TILES_H

#include "common.h"

// Not part of Metal's API; the emulator and CUDA define them (msl.h), Metal composes them of its own
// calls here:
// - simdgroup_multiply_accumulate_pair: two products that share b, d0 = a0 * b + c0 and d1 = a1 * b + c1
//   (one tensor-core instruction with CUDA, whose 16-row operand takes a0 and a1);
// - simdgroup_multiply_accumulate_16x16: d0 = a00 * b0 + a01 * b1 + c0 and d1 = a10 * b0 + a11 * b1 + c1,
//   a 16x16 by 16x8 product (a_rk: row block r, k block k), k block 0 first (one m16n8k16 instruction
//   with CUDA);
// - simdgroup_load4: a 16x16 matrix from threadgroup memory whose rows are 16-byte aligned (the
//   emulator checks; one ldmatrix.x4 with CUDA), as its four 8x8 quadrants m0 (rows 0-7, columns 0-7),
//   m1 (rows 8-15), m2 (columns 8-15), m3 (both); element (r, c) of the 16x16 matrix is src[(origin.y +
//   r) * elements_per_row + origin.x + c], or with transpose src[(origin.y + c) * elements_per_row +
//   origin.x + r], as with simdgroup_load;
// - simdgroup_q4_load(q, rows, row_bytes, k0, lane): 8 rows of MLX 4-bit weights (row j at rows + j ·
//   row_bytes, device memory, 8-byte aligned), columns k0 .. k0+63 (k0 a multiple of 64), into q, a
//   simdgroup_q4_block (what it holds differs by target); lane is the caller's thread_index_in_simdgroup;
// - simdgroup_q4_scales_load(s, scale_bias, lane): the scale and bias of each of 8 rows into s, a
//   simdgroup_q4_scales (what it holds differs by target): row j's are halfs, the low halves of the
//   words scale_bias[2j] and scale_bias[2j + 1] (threadgroup memory, 8-byte aligned; both halves of a
//   word hold the value); loaded once per 64-column step, they serve its 4 k blocks;
// - simdgroup_q4_dequantize(w0, w1, q, block, s, lane): the B operands of k block `block` (0-3) of q,
//   dequantised: element (i, j) of w_f is v · s_j + b_j rounded to half once, for the 4-bit value v of
//   row j in column k0 + q4_fragment_column(16 block + 8f + i) and row j's scale and bias in s.
//   Multiplied with activations stored in q4_fragment_column order, the products are those of the
//   weights in stored order. With CUDA the weights reach the tensor cores without a round trip through
//   threadgroup memory (msl.h).
#if defined(__METAL_VERSION__)
inline void simdgroup_multiply_accumulate_pair(thread simdgroup_float8x8& d0, thread simdgroup_float8x8& d1,
                                               simdgroup_half8x8 a0, simdgroup_half8x8 a1, simdgroup_half8x8 b,
                                               simdgroup_float8x8 c0, simdgroup_float8x8 c1) {
  simdgroup_multiply_accumulate(d0, a0, b, c0);
  simdgroup_multiply_accumulate(d1, a1, b, c1);
}
inline void simdgroup_multiply_accumulate_16x16(thread simdgroup_float8x8& d0, thread simdgroup_float8x8& d1,
                                                simdgroup_half8x8 a00, simdgroup_half8x8 a10, simdgroup_half8x8 a01,
                                                simdgroup_half8x8 a11, simdgroup_half8x8 b0, simdgroup_half8x8 b1,
                                                simdgroup_float8x8 c0, simdgroup_float8x8 c1) {
  simdgroup_multiply_accumulate_pair(d0, d1, a00, a10, b0, c0, c1);
  simdgroup_multiply_accumulate_pair(d0, d1, a01, a11, b1, d0, d1);
}
inline void simdgroup_load4(thread simdgroup_half8x8& m0, thread simdgroup_half8x8& m1, thread simdgroup_half8x8& m2,
                            thread simdgroup_half8x8& m3, threadgroup const half* src, ulong elements_per_row,
                            ulong2 origin = ulong2(0, 0), bool transpose = false) {
  const ulong down = transpose ? 0u : 8u, right = transpose ? 8u : 0u;  // where m1 lies (m2 the other way)
  simdgroup_load(m0, src, elements_per_row, origin, transpose);
  simdgroup_load(m1, src, elements_per_row, ulong2(origin.x + right, origin.y + down), transpose);
  simdgroup_load(m2, src, elements_per_row, ulong2(origin.x + down, origin.y + right), transpose);
  simdgroup_load(m3, src, elements_per_row, ulong2(origin.x + 8u, origin.y + 8u), transpose);
}
inline uint q4_fragment_column(uint j) { return 16u * (j % 8u / 2u) + j / 8u % 4u + 8u * (j / 32u) + 4u * (j % 2u); }
// Metal keeps where the rows are; each lane reads its two elements per fragment (thread_elements():
// row (q & 4) + (lane / 2) % 4 and columns (q & 2) · 2 + (lane % 2) · 2 and the next, q = lane / 4, the
// layout MLX's kernels use).
struct simdgroup_q4_block {
  device const uchar* rows;
  ulong row_bytes;
  uint k0;
};
inline void simdgroup_q4_load(thread simdgroup_q4_block& q, device const uchar* rows, ulong row_bytes, uint k0, ushort lane) {
  q.rows = rows;
  q.row_bytes = row_bytes;
  q.k0 = k0;
}
// Each lane's two rows (j, j + 1 of dequantize's thread_elements() layout).
struct simdgroup_q4_scales {
  half2 scale, bias;
};
inline void simdgroup_q4_scales_load(thread simdgroup_q4_scales& s, threadgroup const uint* scale_bias, ushort lane) {
  const uint j = ((lane / 4u) & 2u) * 2u + (lane % 2u) * 2u;
  for (uint e = 0; e < 2u; ++e) {
    s.scale[e] = as_type<half>(ushort(scale_bias[2u * (j + e)] & 0xffffu));
    s.bias[e] = as_type<half>(ushort(scale_bias[2u * (j + e) + 1u] & 0xffffu));
  }
}
inline void simdgroup_q4_dequantize(thread simdgroup_half8x8& w0, thread simdgroup_half8x8& w1,
                                    thread const simdgroup_q4_block& q, uint block, thread const simdgroup_q4_scales& s,
                                    ushort lane) {
  const uint quad = lane / 4u, i = (quad & 4u) + (lane / 2u) % 4u, j = (quad & 2u) * 2u + (lane % 2u) * 2u;
  for (uint f = 0; f < 2u; ++f) {
    const uint c = q.k0 + q4_fragment_column(16u * block + 8u * f + i);
    half2 v;
    for (uint e = 0; e < 2u; ++e) {
      const uint nibble = (uint(q.rows[ulong(j + e) * q.row_bytes + c / 2u]) >> (4u * (c % 2u))) & 15u;
      v[e] = half(fma(float(nibble), float(s.scale[e]), float(s.bias[e])));
    }
    if (f == 0u)
      reinterpret_cast<thread half2&>(w0.thread_elements()) = v;
    else
      reinterpret_cast<thread half2&>(w1.thread_elements()) = v;
  }
}
#endif

// Halfs per tile row for K-steps of k columns.
#define TILE_LD(k) ((k) + GEMM_PAD)
// A tile's size in uint4 (tiles are declared as uint4 arrays: 16-byte aligned for the loaders' 16-byte
// stores, TILE_LD halfs = a whole number of uint4 per row).
#define TILE_WORDS(rows, k) ((rows) * TILE_LD(k) / 8u)
// Runs of 8 activation columns per thread and tile, at most: 4 for the 64-row tiles of GEMM_THREADS
// at GEMM_K, 2 for the 128-row tiles of GEMM_WIDE_THREADS at GEMM_WIDE_K (ops/matmul.cpp checks).
#define TILE_RUNS_PER_THREAD (GEMM_TILE_ROWS * GEMM_K / 8u / uint(GEMM_THREADS))

// A WeightDesc picked out of a parameter struct's array by constant indices (CUDA copies a by-value
// parameter array indexed at run time into local memory).
inline WeightDesc pick_weight(constant WeightDesc* w, uint j) {
  WeightDesc d;
  d.format = j == 0u ? w[0].format : j == 1u ? w[1].format : j == 2u ? w[2].format : w[3].format;
  d.group_size = j == 0u ? w[0].group_size : j == 1u ? w[1].group_size : j == 2u ? w[2].group_size : w[3].group_size;
  d.scale_type = j == 0u ? w[0].scale_type : j == 1u ? w[1].scale_type : j == 2u ? w[2].scale_type : w[3].scale_type;
  d.row_bytes = j == 0u ? w[0].row_bytes : j == 1u ? w[1].row_bytes : j == 2u ? w[2].row_bytes : w[3].row_bytes;
  d.scale_row_bytes =
      j == 0u ? w[0].scale_row_bytes : j == 1u ? w[1].scale_row_bytes : j == 2u ? w[2].scale_row_bytes : w[3].scale_row_bytes;
  d.rows = j == 0u ? w[0].rows : j == 1u ? w[1].rows : j == 2u ? w[2].rows : w[3].rows;
  d.cols = j == 0u ? w[0].cols : j == 1u ? w[1].cols : j == 2u ? w[2].cols : w[3].cols;
  d.group_shift = j == 0u ? w[0].group_shift : j == 1u ? w[1].group_shift : j == 2u ? w[2].group_shift : w[3].group_shift;
  return d;
}

// The same for one of two descriptions (an expert stack's, or the shared expert's).
inline WeightDesc pick_expert_weight(constant WeightDesc& routed, constant WeightDesc& shared, bool is_shared) {
  WeightDesc d;
  d.format = is_shared ? shared.format : routed.format;
  d.group_size = is_shared ? shared.group_size : routed.group_size;
  d.scale_type = is_shared ? shared.scale_type : routed.scale_type;
  d.row_bytes = is_shared ? shared.row_bytes : routed.row_bytes;
  d.scale_row_bytes = is_shared ? shared.scale_row_bytes : routed.scale_row_bytes;
  d.rows = is_shared ? shared.rows : routed.rows;
  d.cols = is_shared ? shared.cols : routed.cols;
  d.group_shift = is_shared ? shared.group_shift : routed.group_shift;
  return d;
}

// The job of row tile `tile` of a launch (the row tiles of all jobs numbered consecutively, job j's
// from p.first_tile[j]; tiles of `tile_rows` rows): its matrix and buffers, and its first row.
struct GemmJob {
  WeightDesc w;
  device const uchar* data;
  device const uchar* scales;
  device const uchar* biases;
  device float* out;
  uint row0;
};

inline GemmJob gemm_job(constant GemmParams& p, uint tile, uint tile_rows, device const uchar* w0, device const uchar* s0,
                        device const uchar* b0, device float* out0, device const uchar* w1, device const uchar* s1,
                        device const uchar* b1, device float* out1, device const uchar* w2, device const uchar* s2,
                        device const uchar* b2, device float* out2, device const uchar* w3, device const uchar* s3,
                        device const uchar* b3, device float* out3) {
  const uint j = (p.jobs > 1u && tile >= p.first_tile[1] ? 1u : 0u) + (p.jobs > 2u && tile >= p.first_tile[2] ? 1u : 0u) +
                 (p.jobs > 3u && tile >= p.first_tile[3] ? 1u : 0u);
  GemmJob job;
  job.w = pick_weight(p.w, j);
  job.row0 =
      tile_rows * (tile - (j == 0u ? p.first_tile[0] : j == 1u ? p.first_tile[1] : j == 2u ? p.first_tile[2] : p.first_tile[3]));
  job.data = j == 0u ? w0 : j == 1u ? w1 : j == 2u ? w2 : w3;
  job.scales = j == 0u ? s0 : j == 1u ? s1 : j == 2u ? s2 : s3;
  job.biases = j == 0u ? b0 : j == 1u ? b1 : j == 2u ? b2 : b3;
  job.out = j == 0u ? out0 : j == 1u ? out1 : j == 2u ? out2 : out3;
  return job;
}

// a and b rounded to half, as the bits of a half2 (a in the low half; the emulator's half is a class,
// whose assignment cannot target threadgroup memory in the strict address-space mode).
inline uint half2_bits(float a, float b) { return uint(as_type<ushort>(half(a))) | (uint(as_type<ushort>(half(b))) << 16u); }

inline void store_run(threadgroup half* dst, float v0, float v1, float v2, float v3, float v4, float v5, float v6,
                      float v7) {
  store_words(dst, uint4(half2_bits(v0, v1), half2_bits(v2, v3), half2_bits(v4, v5), half2_bits(v6, v7)));
}

// The tiles are double-buffered through registers: a K-step's global reads (fetch_*) are issued
// before the step before it is multiplied and kept raw (no use of a loaded value before the products,
// so that they are in flight meanwhile); store_* then converts them into the tiles. Of the `threads`
// of the threadgroup, thread `tid` holds activation runs tid, tid + threads, ... (runs of them, a
// tile's rows x k / 8 over the threads): run q is row q / (k / 8), columns 8 (q % (k / 8)).
inline uint run_row(uint tid, uint threads, uint i, uint k) { return (tid + threads * i) / (k / 8u); }
inline uint run_column(uint tid, uint threads, uint i, uint k) { return 8u * ((tid + threads * i) % (k / 8u)); }

// A thread's runs of activations: 8 halfs each, the first `runs` used.
struct ActivationRuns {
  uint4 run[TILE_RUNS_PER_THREAD];
};

// Where a thread's runs of each K-step start in x (in uint4s, before the step's column), for the rows
// row_of[0 .. tile rows-1] of x, half rows of `ld` halfs: read from threadgroup memory once, before the
// K-steps (a compiler cannot keep them in registers across the steps' barriers).
struct ActivationRows {
  uint at[TILE_RUNS_PER_THREAD];
};
inline ActivationRows activation_rows(uint ld, threadgroup const uint* row_of, uint k, uint runs, uint tid, uint threads) {
  ActivationRows r{};  // all of it defined: runs may be under TILE_RUNS_PER_THREAD
  for (uint i = 0; i < runs; ++i)
    r.at[i] = uint((ulong(row_of[run_row(tid, threads, i, k)]) * ld + run_column(tid, threads, i, k)) / 8u);
  return r;
}

// Columns k0 .. k0+k-1 of the rows of `rows` (activation_rows) of x, half rows of `ld` halfs
// (half_rows: a multiple of GEMM_K, zero past the values), 8 halfs per uint4. The next step's fetch
// after the last step reads the last step again (k0 clamped) instead of past the row.
inline ActivationRuns fetch_activations(device const uint4* x, uint ld, thread const ActivationRows& rows, uint k0, uint k,
                                        uint runs) {
  const uint kc = min(k0, ld - k) / 8u;
  ActivationRuns a;
  for (uint i = 0; i < runs; ++i) {
    const uint4 run = x[rows.at[i] + kc];
    a.run[i] = run;
  }
  return a;
}

// The fetched runs into `tile`, as they are.
inline void store_activations(thread const ActivationRuns& a, threadgroup half* tile, uint k, uint runs, uint tid,
                              uint threads) {
  for (uint i = 0; i < runs; ++i)
    store_words(tile + run_row(tid, threads, i, k) * TILE_LD(k) + run_column(tid, threads, i, k), a.run[i]);
}

// A thread's weights of one K-step of k columns: half a tile row, k / 2 consecutive columns (two
// threads to a row), row weight_row(tid), columns weight_column(tid, k) .. +k/2-1. 4-bit rows keep the
// whole half row here: lo = its values (2 words at k = 32, 4 at 64), hi.x the scale's word, hi.y the
// bias's; they lie in one group (rows are 16-byte chunks of 32 columns, each in one group:
// GpuBackend::upload). Other formats keep the first 16 columns (Q8: lo = their 4 words, hi.x, hi.y the
// scale's and bias's words of their group; bf16 and f16: lo, hi = the 16 values' bits, two to a word;
// f32: the 16 values rounded to half, two to a word) and store_weights reads the other 16 at k = 64
// itself: one kernel serves every format, so the largest fetch sets the registers held over the
// products for all of them, and 4-bit rows are what the tiled kernels mostly read. The loaders' `dense`
// false compiles the 4- and 8-bit paths only (the MoE kernels' `_affine` builds: fewer registers).
struct WeightRuns {
  uint4 lo;
  uint4 hi;
};
// No fetch yet: what the first K-step's fetch_weights gets as `held` (with `keep` false).
inline WeightRuns no_weight_runs() {
  WeightRuns f;
  f.lo = uint4(0u, 0u, 0u, 0u);
  f.hi = uint4(0u, 0u, 0u, 0u);
  return f;
}
inline uint weight_row(uint tid) { return tid / 2u; }
inline uint weight_column(uint tid, uint k) { return (k / 2u) * (tid % 2u); }

// The scale's and the bias's 4-byte words of a quantized row for column c (`per_word` columns to a
// 4-byte word of values). A 16-bit word holds two groups, so consecutive K-steps often share it: with
// `keep`, the words of `held` (a fetch of the same row `step` columns before) are kept when they are
// the same words instead of read again (each such read is a cache line per row of the tile, a large
// part of the loaders' traffic through L1). `keep` is known at compile time, so that a build without
// it has no trace of `held`.
inline uint2 fetch_scale_words(thread const WeightDesc& w, device const uchar* scales, device const uchar* biases, ulong row,
                               uint c, uint per_word, uint step, thread const WeightRuns& held, bool keep) {
  const uint words = w.row_bytes / 4u;
  const uint group = min(c / per_word, words - 1u) >> w.group_shift;
  const uint before = min((c - step) / per_word, words - 1u) >> w.group_shift;
  const bool fresh = !keep || c < step || scale_word(group, w.scale_type) != scale_word(before, w.scale_type);
  const uint scale = fresh ? load_scale_word(scales + row * w.scale_row_bytes, group, w.scale_type) : held.hi.x;
  const uint bias = fresh ? load_scale_word(biases + row * w.scale_row_bytes, group, w.scale_type) : held.hi.y;
  return uint2(scale, bias);
}

// 16 columns c .. c+15 of a row that is not 4-bit, as WeightRuns keeps them: one vector load of the
// values (16 bytes at 8 bits, two of 16 for bf16/f16; offsets clamped to the row, whose values past
// `cols` are masked later) and the scale's and the bias's word; f32 rows by scalar loads, rounded here
// (the one format whose values are used at once).
inline WeightRuns fetch_16_columns(thread const WeightDesc& w, device const uchar* data, device const uchar* scales,
                                   device const uchar* biases, ulong row, uint c, bool dense, uint step,
                                   thread const WeightRuns& held, bool keep) {
  device const uchar* row_data = data + row * w.row_bytes;
  WeightRuns f;
  if (!dense || w.format == WEIGHT_Q8) {
    const uint2 sw = fetch_scale_words(w, scales, biases, row, c, 4u, step, held, keep);
    const uint4 v = *(device const uint4*)(row_data + min(c, w.row_bytes - 16u));
    f.lo = v;
    f.hi = uint4(sw.x, sw.y, 0u, 0u);
  } else if (w.format == WEIGHT_F32) {
    device const float* row_floats = (device const float*)row_data;
    float v[16];
    for (uint e = 0; e < 16u; ++e) v[e] = row_floats[min(c + e, w.cols - 1u)];
    f.lo = uint4(half2_bits(v[0], v[1]), half2_bits(v[2], v[3]), half2_bits(v[4], v[5]), half2_bits(v[6], v[7]));
    f.hi = uint4(half2_bits(v[8], v[9]), half2_bits(v[10], v[11]), half2_bits(v[12], v[13]), half2_bits(v[14], v[15]));
  } else {
    const uint4 lo = *(device const uint4*)(row_data + min(2u * c, w.row_bytes - 16u));
    const uint4 hi = *(device const uint4*)(row_data + min(2u * c + 16u, w.row_bytes - 16u));
    f.lo = lo;
    f.hi = hi;
  }
  return f;
}

// Weight rows row0 .. row0+tile rows-1 (rows past `rows` repeat the last; their products are never
// stored), columns k0 .. k0+k-1: at 4 bits one vector load of the half row's values (8 or 16 bytes,
// the offset clamped to the row), its scale's and its bias's word; other formats fetch_16_columns.
// `held` is the fetch of the K-step before, whose scale words are kept where they serve this one too
// when `keep` (fetch_scale_words).
inline WeightRuns fetch_weights(thread const WeightDesc& w, device const uchar* data, device const uchar* scales,
                                device const uchar* biases, uint row0, uint rows, uint k0, uint k, uint tid, bool dense,
                                thread const WeightRuns& held, bool keep) {
  const uint c = k0 + weight_column(tid, k);
  const ulong row = ulong(min(row0 + weight_row(tid), rows - 1u));
  if (w.format != WEIGHT_Q4) return fetch_16_columns(w, data, scales, biases, row, c, dense, k, held, keep);
  device const uchar* row_data = data + row * w.row_bytes;
  const uint2 sw = fetch_scale_words(w, scales, biases, row, c, 8u, k, held, keep);
  WeightRuns f;
  f.hi = uint4(sw.x, sw.y, 0u, 0u);
  if (k == 64u) {
    const uint4 v = *(device const uint4*)(row_data + min(c / 2u, w.row_bytes - 16u));
    f.lo = v;
  } else {
    const uint2 v = *(device const uint2*)(row_data + min(c / 2u, w.row_bytes - 8u));
    f.lo = uint4(v.x, v.y, 0u, 0u);
  }
  return f;
}

// Nibble i (i < 4) of a half-word of 4-bit weights times 16^i as a float, without a shift: with the
// half-word under the exponent of 2^23 (`under_2p23`: half-word | 0x4B000000), keeping that exponent and
// nibble i leaves the float 2^23 + q·16^i, exactly (q·16^i < 2^16): one AND per weight.
inline uint under_2p23(uint half_word) { return half_word | 0x4B000000u; }
inline float nibble_in_place(uint under, uint i) {
  return as_type<float>(under & (0x4B000000u | (15u << (4u * i)))) - 8388608.0f;
}

// Word i (i < 8) of the fetched weights.
inline uint weight_word(thread const WeightRuns& f, uint i) {
  const uint4 q = i < 4u ? f.lo : f.hi;
  const uint j = i % 4u;
  return j == 0u ? q.x : j == 1u ? q.y : j == 2u ? q.z : q.w;
}

// A run of 8 4-bit weights (one word) dequantised into `dst`: nibble i of a half-word, in place, times
// the scale over 16^i, the same exact product as scale·q.
inline void store_q4_run(threadgroup half* dst, uint v, float sc, float bi) {
  const float sc1 = sc * 0.0625f, sc2 = sc * 0.00390625f, sc3 = sc * 0.000244140625f;
  const uint lo = under_2p23(v & 0xffffu), hi = under_2p23(v >> 16u);
  store_run(dst, nibble_in_place(lo, 0u) * sc + bi, nibble_in_place(lo, 1u) * sc1 + bi, nibble_in_place(lo, 2u) * sc2 + bi,
            nibble_in_place(lo, 3u) * sc3 + bi, nibble_in_place(hi, 0u) * sc + bi, nibble_in_place(hi, 1u) * sc1 + bi,
            nibble_in_place(hi, 2u) * sc2 + bi, nibble_in_place(hi, 3u) * sc3 + bi);
}

// A run of 8 8-bit weights (two words) dequantised into `dst`.
inline void store_q8_run(threadgroup half* dst, uint v0, uint v1, float sc, float bi) {
  store_run(dst, sc * unpack(v0, 0u, 255u) + bi, sc * unpack(v0, 8u, 255u) + bi, sc * unpack(v0, 16u, 255u) + bi,
            sc * unpack(v0, 24u, 255u) + bi, sc * unpack(v1, 0u, 255u) + bi, sc * unpack(v1, 8u, 255u) + bi,
            sc * unpack(v1, 16u, 255u) + bi, sc * unpack(v1, 24u, 255u) + bi);
}

// The scale or bias of a quantized weight in column c, from its fetched word; zero past the row's
// columns, so that they store zeros (quantized rows are whole groups of 16 or more columns, so a run
// of 8 or 16 columns is all inside or all past).
inline float group_value(thread const WeightDesc& w, uint word, uint c, uint per_word) {
  const uint words = w.row_bytes / 4u, group = min(c / per_word, words - 1u) >> w.group_shift;
  const float value = scale_in_word(word, group, w.scale_type);
  return c < w.cols ? value : 0.0f;
}

// 16 columns c .. c+15 of fetch_16_columns into `dst`, as store_weights converts them.
inline void store_16_columns(thread const WeightRuns& f, thread const WeightDesc& w, uint c, threadgroup half* dst,
                             bool dense) {
  if (!dense || w.format == WEIGHT_Q8) {
    const float sc = group_value(w, f.hi.x, c, 4u), bi = group_value(w, f.hi.y, c, 4u);
    store_q8_run(dst, f.lo.x, f.lo.y, sc, bi);
    store_q8_run(dst + 8u, f.lo.z, f.lo.w, sc, bi);
  } else {
    float v[16];
    for (uint e = 0; e < 16u; ++e) {
      const ushort bits = ushort((weight_word(f, e / 2u) >> (16u * (e % 2u))) & 0xffffu);
      const float value = w.format == WEIGHT_BF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);  // f32: as half
      v[e] = c + e < w.cols ? value : 0.0f;
    }
    store_run(dst, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    store_run(dst + 8u, v[8], v[9], v[10], v[11], v[12], v[13], v[14], v[15]);
  }
}

// The fetched weights dequantised into `tile`: scale·q + bias per weight in fp32, as the GEMV does,
// then rounded to half once; columns past w.cols are zero. At k = 64 a row that is not 4-bit has its
// columns 16 .. 31 of the half row read here (fetch_16_columns, the same arguments as fetch_weights').
inline void store_weights(thread const WeightRuns& f, thread const WeightDesc& w, device const uchar* data,
                          device const uchar* scales, device const uchar* biases, uint row0, uint rows, uint k0, uint k,
                          threadgroup half* tile, uint tid, bool dense) {
  const uint c = k0 + weight_column(tid, k);
  threadgroup half* dst = tile + weight_row(tid) * TILE_LD(k) + weight_column(tid, k);
  if (w.format == WEIGHT_Q4) {
    const float sc = group_value(w, f.hi.x, c, 8u), bi = group_value(w, f.hi.y, c, 8u);
    for (uint i = 0; i < k / 16u; ++i) store_q4_run(dst + 8u * i, weight_word(f, i), sc, bi);
  } else {
    store_16_columns(f, w, c, dst, dense);
    if (k == 64u) {
      const ulong row = ulong(min(row0 + weight_row(tid), rows - 1u));
      store_16_columns(fetch_16_columns(w, data, scales, biases, row, c + 16u, dense, 16u, f, true), w, c + 16u,
                       dst + 16u, dense);
    }
  }
}

// acc[4i + j] += A_i · B_j over one K-step of k columns, for i < token_blocks (even) and j < 4: A_i
// the activation rows t0 + 8i of `xt` ([tokens][k]), B_j the weight rows r0 + 8j of `wt` ([rows][k])
// read transposed, so that the product is x · Wᵀ. 16 columns of k at a time: the B fragments (4 row blocks x 2 k blocks)
// in two loads, then per pair of token blocks their 4 A fragments in one load and 4 products of 16x16
// by 16x8. The summation order over k is that of 8x8 products in k order.
inline void tile_products(threadgroup const half* xt, threadgroup const half* wt, uint k, uint t0, uint r0,
                          uint token_blocks, thread simdgroup_float8x8* acc) {
  // Unrolled: nvcc keeps the loop otherwise, recomputing each load's lane addresses per 16 columns.
#pragma unroll
  for (uint kk = 0; kk < k; kk += 16u) {
    simdgroup_half8x8 b[8];  // b[2j]: row block j, k block 0; b[2j + 1]: k block 1
    simdgroup_load4(b[0], b[1], b[2], b[3], wt, TILE_LD(k), ulong2(kk, r0), true);
    simdgroup_load4(b[4], b[5], b[6], b[7], wt, TILE_LD(k), ulong2(kk, r0 + 16u), true);
    for (uint i = 0; i < token_blocks; i += 2u) {
      simdgroup_half8x8 a00, a10, a01, a11;  // token block i + r, k block k
      simdgroup_load4(a00, a10, a01, a11, xt, TILE_LD(k), ulong2(kk, t0 + 8u * i));
      for (uint j = 0; j < 4u; ++j)
        simdgroup_multiply_accumulate_16x16(acc[4u * i + j], acc[4u * i + 4u + j], a00, a10, a01, a11, b[2u * j],
                                            b[2u * j + 1u], acc[4u * i + j], acc[4u * i + 4u + j]);
    }
  }
}

// Row slab i (rows 8i .. 8i+7) of the simdgroup's block of results (32 columns) into `staging` (8 rows of
// STAGING_LD floats), where lane l may then read column l of each row (after the simdgroup_barrier
// inside). The caller reads the slab, then calls slab_done before the next slab overwrites it.
#define STAGING_LD (32u + GEMM_OUT_PAD)
inline void stage_slab(thread const simdgroup_float8x8* acc, uint i, threadgroup float* staging) {
  for (uint j = 0; j < 4u; ++j) simdgroup_store(acc[4u * i + j], staging + 8u * j, STAGING_LD);
  simdgroup_barrier(mem_flags::mem_threadgroup);
}
inline void slab_done() { simdgroup_barrier(mem_flags::mem_threadgroup); }

// ---- 4-bit weights straight into fragments (simdgroup_q4_load, simdgroup_q4_dequantize) ----
// A simdgroup multiplies its own 8-row blocks of weights, read from device memory by
// simdgroup_q4_load, with activation tiles in q4_fragment_column order (copied as they are from half
// rows written in that order: half_rows' fragment_order, moe_gate_up_q4_tile's h); the rows' scales and
// biases for Q4_SCALE_GROUPS groups at a time are staged as halfs in threadgroup memory. Weights in MLX
// affine 4-bit groups of 64 columns (one group per 64-column step) whose scales and biases are all
// exact in half (GpuBackend checks at upload).

// Where column c of a half row in q4_fragment_column order is stored: its 64-column block is permuted
// (the inverse of q4_fragment_column within the block).
inline uint q4_fragment_index(uint c) {
  const uint p = c % 64u;
  return c - p + 8u * (p % 4u) + 32u * (p % 16u / 8u) + 2u * (p / 16u) + p / 4u % 2u;
}

// The stored bits of groups g .. g+Q4_SCALE_RUN-1 of a row of scales or biases (as load_scale reads
// them: 16-bit values two to a word in x and y, f32 one to a word), groups past the row's last
// repeating it: one 8- or 16-byte load when the run lies in the row and `vector_loads` (rows of scales so
// aligned), else one word per group.
inline uint4 q4_scale_words(thread const WeightDesc& w, device const uchar* row, uint g, uint groups, bool vector_loads) {
  const bool f32 = w.scale_type == SCALE_F32;
  if (vector_loads && g + Q4_SCALE_RUN <= groups) {
    if (f32) return *(device const uint4*)(row + 4u * g);
    const uint2 v = *(device const uint2*)(row + 2u * g);
    return uint4(v.x, v.y, 0u, 0u);
  }
  uint bits[Q4_SCALE_RUN];
  for (uint e = 0; e < Q4_SCALE_RUN; ++e) {
    const uint ge = min(g + e, groups - 1u), word = load_scale_word(row, ge, w.scale_type);
    bits[e] = f32 ? word : scale_bits16(word, ge);
  }
  return f32 ? uint4(bits[0], bits[1], bits[2], bits[3]) : uint4(bits[0] | (bits[1] << 16u), bits[2] | (bits[3] << 16u), 0u, 0u);
}

// Value e of a run of q4_scale_words, as a half in both halves of a word (scale_in_word reads the word
// that holds it, as if it were group e).
inline uint q4_scale_pair(thread const WeightDesc& w, uint4 words, uint e) {
  const uint f32_word = e == 0u ? words.x : e == 1u ? words.y : e == 2u ? words.z : words.w;
  const uint word = w.scale_type == SCALE_F32 ? f32_word : e < 2u ? words.x : words.y;
  return 0x10001u * uint(as_type<ushort>(half(scale_in_word(word, e, w.scale_type))));
}

// The scales and biases of groups g0 .. g0+Q4_SCALE_GROUPS-1 (clamped to the row's last) of weight rows
// row0 .. row0+count-1 (clamped to rows-1; count at most Q4_TILE_ROWS, count · Q4_SCALE_GROUPS a
// multiple of Q4_SCALE_RUN · threads) into the words staged[2 (slot · Q4_TILE_ROWS + r)] (the scale)
// and the one after it (the bias), slot = g - g0, each as a half in both halves of its word. A thread
// takes runs of Q4_SCALE_RUN groups of a row and issues all its loads before its first store, so that
// the staging waits for memory once.
#define Q4_SCALE_RUNS_MAX (Q4_TILE_ROWS * Q4_SCALE_GROUPS / Q4_SCALE_RUN / uint(GEMM_THREADS))
inline void stage_q4_scales(thread const WeightDesc& w, device const uchar* scales, device const uchar* biases, uint row0,
                            uint count, uint g0, threadgroup uint* staged, uint tid, uint threads) {
  constexpr uint RUNS_PER_ROW = Q4_SCALE_GROUPS / Q4_SCALE_RUN;
  const uint groups = w.cols / 64u, runs = count * RUNS_PER_ROW / threads;
  const bool vector_loads = w.scale_row_bytes % (w.scale_type == SCALE_F32 ? 16u : 8u) == 0u;
  uint4 sw[Q4_SCALE_RUNS_MAX], bw[Q4_SCALE_RUNS_MAX];
  for (uint i = 0; i < runs; ++i) {
    const uint f = tid + threads * i, r = f / RUNS_PER_ROW, g = g0 + Q4_SCALE_RUN * (f % RUNS_PER_ROW);
    const ulong row = ulong(min(row0 + r, w.rows - 1u));
    sw[i] = q4_scale_words(w, scales + row * w.scale_row_bytes, g, groups, vector_loads);
    bw[i] = q4_scale_words(w, biases + row * w.scale_row_bytes, g, groups, vector_loads);
  }
  for (uint i = 0; i < runs; ++i) {
    const uint f = tid + threads * i, r = f / RUNS_PER_ROW, s0 = Q4_SCALE_RUN * (f % RUNS_PER_ROW);
    for (uint e = 0; e < Q4_SCALE_RUN; ++e) {
      staged[2u * ((s0 + e) * Q4_TILE_ROWS + r)] = q4_scale_pair(w, sw[i], e);
      staged[2u * ((s0 + e) * Q4_TILE_ROWS + r) + 1u] = q4_scale_pair(w, bw[i], e);
    }
  }
}

// Where a simdgroup's row block starts: rows past the matrix read its last 8 rows instead (rows are a
// multiple of 8 on this path; what those blocks produce is never stored).
inline device const uchar* q4_block_rows(thread const WeightDesc& w, device const uchar* data, uint row) {
  return data + ulong(min(row, w.rows - 8u)) * w.row_bytes;
}

// `blocks` row blocks of 8 rows from row r0 (q4_block_rows), columns k0 .. k0+63, into q.
inline void q4_load_blocks(thread simdgroup_q4_block* q, thread const WeightDesc& w, device const uchar* data, uint r0, uint k0,
                           uint blocks, ushort lane) {
  for (uint j = 0; j < blocks; ++j) simdgroup_q4_load(q[j], q4_block_rows(w, data, r0 + 8u * j), w.row_bytes, k0, lane);
}

// acc[4i + j] += A_i · B_j over one 64-column step, for the token blocks i < token_blocks (even) of
// `xt` (stored in q4_fragment_column order) and the simdgroup's 4 row blocks j of q (scale_bias_01 and
// scale_bias_23: the staged pairs of blocks 0-1's and 2-3's 16 rows, which may be of two matrices);
// per 16 columns, the 4 row blocks' fragments, then per pair of token blocks their A fragments in one
// load and 4 products of 16x16 by 16x8 (k in q4_fragment_column order).
inline void q4_products(threadgroup const half* xt, thread const simdgroup_q4_block* q, threadgroup const uint* scale_bias_01,
                        threadgroup const uint* scale_bias_23, uint token_blocks, ushort lane, thread simdgroup_float8x8* acc) {
  simdgroup_q4_scales s[4];
  for (uint j = 0; j < 2u; ++j) {
    simdgroup_q4_scales_load(s[j], scale_bias_01 + 16u * j, lane);
    simdgroup_q4_scales_load(s[2u + j], scale_bias_23 + 16u * j, lane);
  }
  // Unrolled, so that each block's byte selection and fragment addresses are constants (the 4-bit
  // kernels' registers are capped by MIN_RESIDENT_THREADGROUPS; with CUDA, sm_90, only the gate/up `_q4`
  // build spills, 8 bytes).
#pragma unroll
  for (uint block = 0; block < 4u; ++block) {
    simdgroup_half8x8 w[8];  // w[2j], w[2j + 1]: row block j, k halves 0 and 1
    for (uint j = 0; j < 4u; ++j) simdgroup_q4_dequantize(w[2u * j], w[2u * j + 1u], q[j], block, s[j], lane);
    for (uint i = 0; i < token_blocks; i += 2u) {
      simdgroup_half8x8 a00, a10, a01, a11;  // token block i + r, k half k
      simdgroup_load4(a00, a10, a01, a11, xt, TILE_LD(GEMM_K), ulong2(16u * block, 8u * i));
      for (uint j = 0; j < 4u; ++j)
        simdgroup_multiply_accumulate_16x16(acc[4u * i + j], acc[4u * i + 4u + j], a00, a10, a01, a11, w[2u * j],
                                            w[2u * j + 1u], acc[4u * i + j], acc[4u * i + 4u + j]);
    }
  }
}
#endif
