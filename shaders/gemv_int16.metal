// The fp16 precision's GEMVs: x quantised to int16 blocks once per call (quantize_int16), then integer
// products with 4-bit weights (gemv_int16), for the projections of calls shorter than PREFILL_MIN_TOKENS.
// Fewer instructions per weight than the fp32 GEMV, whose instruction issue bounds it (docs/metal.md,
// "Decode in int16"), at an error of at most d / 2 per activation, d = max|x| / INT16_QMAX over its block.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// xq[t], de[t] = row t of x [n, cols] quantised in blocks of INT16_BLOCK columns, one simdgroup per
// block (store_block_int16); grid (ceil(cols / INT16_BLOCK / QUANTIZE_SIMDGROUPS), n).
[[max_total_threads_per_threadgroup(QUANTIZE_THREADS)]] kernel void quantize_int16(
    device const float* x [[buffer(0)]], device ushort* xq [[buffer(1)]], device float* de [[buffer(2)]],
    constant QuantizeParams& p [[buffer(3)]], uint2 group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  const uint blocks = p.cols / INT16_BLOCK, j = group.x * QUANTIZE_SIMDGROUPS + sg, t = group.y;
  if (j >= blocks) return;  // the whole simdgroup
  const ulong block = ulong(t) * blocks + j;
  store_block_int16(x[INT16_BLOCK * block + lane], xq, de, block, lane);
}

// out_j[t, r] = W_j[r] · x̂[t] for up to GEMV_MAX_JOBS 4-bit matrices with bf16 scales that read the same
// quantised input (rows_dot_int16); blocks of rows, split-K and grid as gemv's.
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void gemv_int16(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                       device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                       device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                       device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                       device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                       device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                       device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                       device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                       device const uint4* xq [[buffer(16)]], device const float2* de [[buffer(17)]],
                       constant GemvParams& p [[buffer(18)]], uint2 group [[threadgroup_position_in_grid]],
                       uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[GEMV_SIMDGROUPS * GEMV_ROWS];
  const uint parts = p.split, part = sg % parts, block = group.x * (GEMV_SIMDGROUPS / parts) + sg / parts;
  const uint t = group.y;
  const bool live = block < p.total_blocks;
  const uint b = min(block, p.total_blocks - 1u);
  const uint j = (p.jobs > 1u && b >= p.first_block[1] ? 1u : 0u) + (p.jobs > 2u && b >= p.first_block[2] ? 1u : 0u) +
                 (p.jobs > 3u && b >= p.first_block[3] ? 1u : 0u);
  const uint row0 = GEMV_ROWS * (b - (j == 0u ? p.first_block[0] : j == 1u ? p.first_block[1] : j == 2u ? p.first_block[2] : p.first_block[3]));
  const uint rows = j == 0u ? p.w[0].rows : j == 1u ? p.w[1].rows : j == 2u ? p.w[2].rows : p.w[3].rows;
  device float* out = (j == 0u ? out0 : j == 1u ? out1 : j == 2u ? out2 : out3) + ulong(t) * rows;
  const uint count = live ? min(GEMV_ROWS, rows - row0) : 0u;
  if (live && part == 0u) {  // the rows' weights on their way while the previous kernel finishes
    if (j == 0u) prefetch_rows(p.w[0], w0, s0, b0, row0, count, lane);
    else if (j == 1u) prefetch_rows(p.w[1], w1, s1, b1, row0, count, lane);
    else if (j == 2u) prefetch_rows(p.w[2], w2, s2, b2, row0, count, lane);
    else prefetch_rows(p.w[3], w3, s3, b3, row0, count, lane);
  }
  await_inputs();
  const uint blocks = p.cols / INT16_BLOCK;
  device const uint4* xt = xq + ulong(t) * blocks * 4u;
  device const float2* et = de + ulong(t) * blocks;
  float acc[GEMV_ROWS];
  for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] = 0.0f;
  if (live) {
    if (j == 0u) rows_dot_int16(p.w[0], w0, s0, b0, row0, count, xt, et, lane, part, parts, acc);
    else if (j == 1u) rows_dot_int16(p.w[1], w1, s1, b1, row0, count, xt, et, lane, part, parts, acc);
    else if (j == 2u) rows_dot_int16(p.w[2], w2, s2, b2, row0, count, xt, et, lane, part, parts, acc);
    else rows_dot_int16(p.w[3], w3, s3, b3, row0, count, xt, et, lane, part, parts, acc);
  }
  if (parts == 1u) {
    for (uint r = 0; r < GEMV_ROWS; ++r) {
      const float v = simd_sum(acc[r]);
      if (lane == 0u && r < count) out[row0 + r] = v;
    }
    return;
  }
  const float v = block_rows_sum(acc, partial, sg, lane, parts);
  if (part == 0u && lane < count) out[row0 + lane] = v;
}
