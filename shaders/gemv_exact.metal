// The exact GEMV of MLX 4-bit matrices (groups of 64, bf16 scales and biases) on the matrix units: the
// exact jobs of calls that the GEMV takes (the lm_head of a decode step), to fp32 accuracy with fp16
// operands. Per group of 64 columns, x scaled by 2^-e (e from the group's largest |x|, so that every
// value lies in (-1, 1)) is the sum of three halves, x' = h0 + 2^-11 h1 + 2^-22 h2, to 2^-35 of the
// group's largest (two would leave 2^-24 of it, the order of the fp32 sums' own rounding; the third costs
// no products: the A operand has 8 rows either way), and a weight's 4-bit value v is exact in half,
// so every product v·h is exact and the matrix units sum a group's 64 of them in fp32: D_p = Σ v·h_p per
// row. Then y += scale · 2^e (D_0 + 2^-11 D_1 + 2^-22 D_2) + bias · Σx per group, in fp32: the fp32 GEMV's
// group sums (rows_dot), up to the order of the additions, at about 3 instructions per weight instead of
// its 5-6 (the GEMV is bound by instruction issue: docs/metal.md, "Decode in int16").
#include <metal_stdlib>
using namespace metal;
#include "tiles.h"

// Halves per row of the pieces' tile: a chunk's columns, padded by 8 (16-byte rows, staggered banks).
#define GEMV_EXACT_LD (GEMV_EXACT_CHUNK + 8u)

// 2^e as a float, for e in [-126, 127].
inline float pow2(int e) { return as_type<float>(uint(127 + e) << 23u); }

// The position of column c (0-63) of a 64-column step in q4_fragment_column order (its inverse).
inline uint q4_fragment_position(uint c) { return 8u * (c % 4u) + 2u * (c / 16u) + (c / 4u) % 2u + 32u * ((c / 8u) % 2u); }

// The pieces of x [n, cols] row t, columns c0 .. c0 + GEMV_EXACT_CHUNK - 1 (the chunk; columns past
// cols are 0), into rows 0-2 of `tile` in q4_fragment_column order per 64 columns, and each group's 2^e
// and Σx. Thread tid takes 8 columns of group tid / 8; its columns i and i + 4 are adjacent in the tile.
inline void exact_pieces(device const float* xt, uint cols, uint c0, threadgroup uint* tile, threadgroup float* group_pow2,
                         threadgroup float* group_sum, uint tid, uint lane) {
  const uint g = tid / 8u, u = tid % 8u, first = c0 + 64u * g + 8u * u;
  float v[8];
  for (uint i = 0; i < 8u; ++i) v[i] = first + i < cols ? xt[first + i] : 0.0f;
  float mx = 0.0f, sum = 0.0f;
  for (uint i = 0; i < 8u; ++i) {
    mx = max(mx, abs(v[i]));
    sum += v[i];
  }
  for (uint m = 1u; m < 8u; m *= 2u) {  // the 8 lanes of the group
    mx = max(mx, simd_shuffle_xor(mx, ushort(m)));
    sum += simd_shuffle_xor(sum, ushort(m));
  }
  const int e = min(int((as_type<uint>(mx) >> 23u) & 0xffu) - 126, 126);  // mx < 2^e
  const float down = pow2(-e);
  float h[3][8];
  for (uint i = 0; i < 8u; ++i) {
    const float x0 = v[i] * down;
    h[0][i] = float(half(x0));
    const float r1 = x0 - h[0][i];
    h[1][i] = float(half(r1 * 2048.0f));
    const float r2 = r1 - h[1][i] * (1.0f / 2048.0f);
    h[2][i] = float(half(r2 * 4194304.0f));
  }
  for (uint p = 0; p < 3u; ++p)
    for (uint i = 0; i < 4u; ++i) {
      const uint at = 64u * g + q4_fragment_position(8u * u + i);  // even: the pair (i, i + 4)
      tile[(p * GEMV_EXACT_LD + at) / 2u] = half2_bits(h[p][i], h[p][i + 4u]);
    }
  if (u == 0u) {
    group_pow2[g] = pow2(e);
    group_sum[g] = sum;
  }
}

// out[t, r] = W[r] · x[t] for one matrix W (p.w[0]: MLX 4-bit, groups of 64, bf16 scales, rows a multiple
// of 8); grid (ceil(rows / (GEMV_EXACT_ROWS · GEMV_EXACT_SIMDGROUPS)), n). The pieces are the A operand
// (rows 0-2 of 8; rows 3-7 zero) from threadgroup memory, the weights the B operand straight from
// memory (simdgroup_q4_load, dequantised with scale 1 and bias 0: their values); a group's products go
// into a fresh accumulator, staged through threadgroup memory for the scales.
[[max_total_threads_per_threadgroup(GEMV_EXACT_THREADS)]] kernel void gemv_exact_q4(
    device const uchar* w [[buffer(0)]], device const uchar* s [[buffer(1)]], device const uchar* b [[buffer(2)]],
    device float* out [[buffer(3)]], device const float* x [[buffer(4)]], constant GemvParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint pieces[8u * GEMV_EXACT_LD / 2u];
  threadgroup float group_pow2[GEMV_EXACT_CHUNK / 64u];
  threadgroup float group_sum[GEMV_EXACT_CHUNK / 64u];
  threadgroup uint unit[16];  // scale 1 and bias 0 of 8 rows, as simdgroup_q4_scales_load reads them
  threadgroup float stage[GEMV_EXACT_SIMDGROUPS * 2u * 64u];  // per simdgroup and row block: D [8 x 8]
  const WeightDesc wd = pick_weight(p.w, 0u);
  const uint t = group.y, r0 = (group.x * GEMV_EXACT_SIMDGROUPS + sg) * GEMV_EXACT_ROWS;
  device const float* xt = x + ulong(t) * p.cols;
  for (uint i = tid; i < 5u * GEMV_EXACT_LD / 2u; i += GEMV_EXACT_THREADS) pieces[3u * GEMV_EXACT_LD / 2u + i] = 0u;
  if (tid < 16u) unit[tid] = tid % 2u == 0u ? 0x3c003c00u : 0u;  // half 1.0 in both halves; 0
  simdgroup_q4_scales unit_scales[2];
  float acc = 0.0f;  // lanes 0-15: row r0 + lane
  const uint row = r0 + lane % 16u;
  device const ushort* srow = (device const ushort*)(s + ulong(min(row, wd.rows - 1u)) * wd.scale_row_bytes);
  device const ushort* brow = (device const ushort*)(b + ulong(min(row, wd.rows - 1u)) * wd.scale_row_bytes);
  threadgroup float* d_stage = stage + sg * 128u;
  for (uint c0 = 0; c0 < p.cols; c0 += GEMV_EXACT_CHUNK) {
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the last chunk's pieces are read
    exact_pieces(xt, p.cols, c0, pieces, group_pow2, group_sum, tid, lane);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = 0; j < 2u; ++j) simdgroup_q4_scales_load(unit_scales[j], unit, ushort(lane));
    threadgroup const half* tile = (threadgroup const half*)pieces;
    const uint chunk_groups = min(GEMV_EXACT_CHUNK, p.cols - c0) / 64u;
    simdgroup_q4_block q[2];
    q4_load_blocks(q, wd, w, r0, c0, 2u, ushort(lane));
    for (uint g = 0; g < chunk_groups; ++g) {
      const uint k0 = c0 + 64u * g, gi = k0 / 64u;
      // The next group's weights (this one's again after the last) and this group's scale and bias
      // (lanes 0-15: row r0 + lane), in flight during the products.
      simdgroup_q4_block qn[2];
      q4_load_blocks(qn, wd, w, r0, c0 + 64u * min(g + 1u, chunk_groups - 1u), 2u, ushort(lane));
      const float scale = bf16_bits_to_float(srow[gi]), bias = bf16_bits_to_float(brow[gi]);
      simdgroup_float8x8 d[2], spare = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      const simdgroup_half8x8 zero = make_filled_simdgroup_matrix<half, 8, 8>(half(0.0f));
      for (uint j = 0; j < 2u; ++j) d[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      for (uint block = 0; block < 4u; ++block) {
        simdgroup_half8x8 a0, a1;  // pieces x k 0-7 and 8-15 of the block
        simdgroup_load(a0, tile, GEMV_EXACT_LD, ulong2(64u * g + 16u * block, 0u));
        simdgroup_load(a1, tile, GEMV_EXACT_LD, ulong2(64u * g + 16u * block + 8u, 0u));
        for (uint j = 0; j < 2u; ++j) {
          simdgroup_half8x8 v0, v1;
          simdgroup_q4_dequantize(v0, v1, q[j], block, unit_scales[j], ushort(lane));
          simdgroup_multiply_accumulate_16x16(d[j], spare, a0, zero, a1, zero, v0, v1, d[j], spare);
        }
      }
      for (uint j = 0; j < 2u; ++j) simdgroup_store(d[j], d_stage + 64u * j, 8u);
      simdgroup_barrier(mem_flags::mem_threadgroup);
      if (lane < 16u) {
        threadgroup const float* dj = d_stage + 64u * (lane / 8u) + lane % 8u;  // D[piece][row]
        const float dot = group_pow2[g] * (dj[0] + dj[8] * (1.0f / 2048.0f) + dj[16] * (1.0f / 4194304.0f));
        acc += scale * dot + bias * group_sum[g];
      }
      simdgroup_barrier(mem_flags::mem_threadgroup);  // the stage is overwritten by the next group
      for (uint j = 0; j < 2u; ++j) q[j] = qn[j];
    }
  }
  if (lane < 16u && row < wd.rows) out[ulong(t) * wd.rows + row] = acc;
}
