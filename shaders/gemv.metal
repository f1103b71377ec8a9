// Matrix-vector products with fused dequantisation (MLX affine 4/8-bit, or dense bf16/f16/f32 rows),
// fp32 accumulation: the projections, the router, the shared expert and the lm_head.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// out_j[t, r] = W_j[r] · x[t] for up to GEMV_MAX_JOBS matrices that read the same input x [n, cols]
// (fused projections: one launch). The rows of all jobs form blocks of GEMV_ROWS, numbered
// consecutively; p.split simdgroups share a block (split-K: each takes every p.split-th group of 32
// words, and the first adds the parts up through threadgroup memory), so that a small matrix still
// keeps many simdgroups loading; grid (ceil(total_blocks · split / GEMV_SIMDGROUPS), n).
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void gemv(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                 device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                 device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                 device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                 device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                 device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                 device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                 device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                 device const float* x [[buffer(16)]], constant GemvParams& p [[buffer(17)]],
                 uint2 group [[threadgroup_position_in_grid]], uint sg [[simdgroup_index_in_threadgroup]],
                 uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[GEMV_SIMDGROUPS * GEMV_ROWS];
  const uint parts = p.split, part = sg % parts, block = group.x * (GEMV_SIMDGROUPS / parts) + sg / parts;
  const uint t = group.y;
  const bool live = block < p.total_blocks;
  const uint b = min(block, p.total_blocks - 1u);
  // Fields and jobs by constant index: CUDA would copy a by-value parameter array indexed at run time
  // into local memory.
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
  device const float* xt = x + ulong(t) * p.cols;
  const bool vec = p.x_vec4 != 0u;
  float acc[GEMV_ROWS];
  for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] = 0.0f;
  if (live) {
    if (j == 0u) rows_dot(p.w[0], w0, s0, b0, row0, count, xt, vec, lane, part, parts, acc);
    else if (j == 1u) rows_dot(p.w[1], w1, s1, b1, row0, count, xt, vec, lane, part, parts, acc);
    else if (j == 2u) rows_dot(p.w[2], w2, s2, b2, row0, count, xt, vec, lane, part, parts, acc);
    else rows_dot(p.w[3], w3, s3, b3, row0, count, xt, vec, lane, part, parts, acc);
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
