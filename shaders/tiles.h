// The tiled prefill kernels' building blocks: stored weights and fp32 activations converted into
// threadgroup tiles of half (the operands of the matrix units), a simdgroup's 32x32 block of products
// on simdgroup matrices with fp32 accumulation, and its epilogue through threadgroup memory.
// Tiles are [GEMM_TILE_* rows][GEMM_K + GEMM_PAD] halfs; every loader is called by all GEMM_THREADS
// threads of the threadgroup, each converting runs of 8 consecutive columns.
#ifndef MOELENS_SHADER_TILES_H
#define MOELENS_SHADER_TILES_H

#include "common.h"

#define TILE_LD (GEMM_K + GEMM_PAD)
// Runs of 8 columns per tile, and per thread.
#define TILE_RUNS (GEMM_TILE_ROWS * GEMM_K / 8u)
#define TILE_RUNS_PER_THREAD (TILE_RUNS / uint(GEMM_THREADS))

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

// v rounded to half into a tile, as its 16-bit pattern (the emulator's half is a class, whose
// assignment cannot target threadgroup memory in the strict address-space mode).
inline void store_half(threadgroup half* dst, float v) { *(threadgroup ushort*)dst = as_type<ushort>(half(v)); }

// Weight rows row0 .. row0+GEMM_TILE_ROWS-1 (rows past `rows` repeat the last; their products are
// never stored), columns k0 .. k0+GEMM_K-1 (columns past w.cols are zero), dequantised into `tile`.
// Quantized: a run of 8 columns lies in one group (group sizes are multiples of 16) and in one word
// (q4) or two (q8), so it costs one scale, one bias and an fma per weight, in fp32, as the GEMV does.
inline void weight_tile(thread const WeightDesc& w, device const uchar* data, device const uchar* scales,
                        device const uchar* biases, uint row0, uint rows, uint k0, threadgroup half* tile, uint tid) {
  const bool q4 = w.format == WEIGHT_Q4, quantized = q4 || w.format == WEIGHT_Q8;
  for (uint i = 0; i < TILE_RUNS_PER_THREAD; ++i) {
    const uint run = tid + uint(GEMM_THREADS) * i, r = run / (GEMM_K / 8u), c = k0 + 8u * (run % (GEMM_K / 8u));
    const ulong row = ulong(min(row0 + r, rows - 1u));
    device const uchar* row_data = data + row * w.row_bytes;
    threadgroup half* dst = tile + r * TILE_LD + 8u * (run % (GEMM_K / 8u));
    const bool in = c < w.cols;
    if (quantized) {
      const uint words = w.row_bytes / 4u, per_word = q4 ? 8u : 4u;
      const uint wi = min(c / per_word, words - 1u), wj = min(wi + 1u, words - 1u), group = wi >> w.group_shift;
      const uint v0 = ((device const uint*)row_data)[wi];
      const uint v1 = ((device const uint*)row_data)[wj];
      const float sc = load_scale(scales + row * w.scale_row_bytes, group, w.scale_type);
      const float bi = load_scale(biases + row * w.scale_row_bytes, group, w.scale_type);
      for (uint e = 0; e < 8u; ++e) {
        const float q = q4 ? unpack(v0, 4u * e, 15u) : unpack(e < 4u ? v0 : v1, 8u * (e & 3u), 255u);
        store_half(dst + e, in ? sc * q + bi : 0.0f);
      }
    } else {
      float v[8];
      for (uint e = 0; e < 8u; ++e) v[e] = load_dense(row_data, min(c + e, w.cols - 1u), w.format);
      for (uint e = 0; e < 8u; ++e) store_half(dst + e, c + e < w.cols ? v[e] : 0.0f);
    }
  }
}

// Columns k0 .. k0+GEMM_K-1 (past cols: zero) of the rows row_of[0 .. GEMM_TILE_TOKENS-1] of x [*, cols]
// (the chunk's tokens, or a bucket's rows gathered), converted to half into `tile`.
inline void activation_tile(device const float* x, uint cols, threadgroup const uint* row_of, uint k0,
                            threadgroup half* tile, uint tid) {
  for (uint i = 0; i < TILE_RUNS_PER_THREAD; ++i) {
    const uint run = tid + uint(GEMM_THREADS) * i, r = run / (GEMM_K / 8u), c = k0 + 8u * (run % (GEMM_K / 8u));
    device const float* row = x + ulong(row_of[r]) * cols;
    float v[8];
    for (uint e = 0; e < 8u; ++e) v[e] = row[min(c + e, cols - 1u)];
    threadgroup half* dst = tile + r * TILE_LD + 8u * (run % (GEMM_K / 8u));
    for (uint e = 0; e < 8u; ++e) store_half(dst + e, c + e < cols ? v[e] : 0.0f);
  }
}

// acc[4i + j] += A_i · B_j over one K-step: A_i the activation rows 32·m + 8i of `xt` ([tokens][k]), B_j
// the weight rows 32·c + 8j of `wt` ([rows][k]) read transposed, so that the product is x · Wᵀ.
inline void tile_products(threadgroup const half* xt, threadgroup const half* wt, uint m, uint c,
                          thread simdgroup_float8x8* acc) {
  for (uint kk = 0; kk < GEMM_K; kk += 8u) {
    simdgroup_half8x8 a[4], b[4];
    for (uint i = 0; i < 4u; ++i) simdgroup_load(a[i], xt + (32u * m + 8u * i) * TILE_LD + kk, TILE_LD);
    for (uint j = 0; j < 4u; ++j)
      simdgroup_load(b[j], wt + (32u * c + 8u * j) * TILE_LD + kk, TILE_LD, ulong2(0, 0), true);
    for (uint i = 0; i < 4u; ++i)
      for (uint j = 0; j < 4u; ++j) simdgroup_multiply_accumulate(acc[4u * i + j], a[i], b[j], acc[4u * i + j]);
  }
}

// Row slab i (rows 8i .. 8i+7) of the simdgroup's 32x32 block of results into `staging` (8 rows of
// STAGING_LD floats), where lane l may then read column l of each row (after the simdgroup_barrier
// inside). The caller reads the slab, then calls slab_done before the next slab overwrites it.
#define STAGING_LD (32u + GEMM_OUT_PAD)
inline void stage_slab(thread const simdgroup_float8x8* acc, uint i, threadgroup float* staging) {
  for (uint j = 0; j < 4u; ++j) simdgroup_store(acc[4u * i + j], staging + 8u * j, STAGING_LD);
  simdgroup_barrier(mem_flags::mem_threadgroup);
}
inline void slab_done() { simdgroup_barrier(mem_flags::mem_threadgroup); }

#endif
