// Matrix-vector products with fused dequantisation (MLX affine 4/8-bit, or dense bf16/f16/f32 rows),
// fp32 accumulation: the projections, the router, the shared expert and the lm_head.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// Rows GEMV_ROWS·block .. of out[t] = W · x[t], by one simdgroup.
inline void gemv_block(constant WeightDesc& w, device const uchar* data, device const uchar* scales,
                       device const uchar* biases, device float* out, uint block, uint t, device const float* x,
                       bool vec, uint lane) {
  const uint row0 = block * GEMV_ROWS, count = min(GEMV_ROWS, w.rows - row0);
  float acc[GEMV_ROWS];
  rows_dot(w, data, scales, biases, row0, count, x, vec, lane, acc);
  for (uint r = 0; r < GEMV_ROWS; ++r) {
    const float v = simd_sum(acc[r]);
    if (lane == 0u && r < count) out[ulong(t) * w.rows + row0 + r] = v;
  }
}

// out_j[t, r] = W_j[r] · x[t] for up to GEMV_MAX_JOBS matrices that read the same input x [n, cols]
// (fused projections: one launch). Each simdgroup computes a block of GEMV_ROWS rows of one matrix;
// the blocks of all jobs are numbered consecutively; grid (ceil(total_blocks / GEMV_SIMDGROUPS), n).
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
  const uint block = group.x * GEMV_SIMDGROUPS + sg;
  const uint t = group.y;
  if (block >= p.total_blocks) return;
  // Fields and jobs by constant index: CUDA would copy a by-value parameter array indexed at run time
  // into local memory.
  const uint j = (p.jobs > 1u && block >= p.first_block[1] ? 1u : 0u) + (p.jobs > 2u && block >= p.first_block[2] ? 1u : 0u) +
                 (p.jobs > 3u && block >= p.first_block[3] ? 1u : 0u);
  device const float* xt = x + ulong(t) * p.cols;
  const bool vec = p.x_vec4 != 0u;
  if (j == 0u) gemv_block(p.w[0], w0, s0, b0, out0, block - p.first_block[0], t, xt, vec, lane);
  else if (j == 1u) gemv_block(p.w[1], w1, s1, b1, out1, block - p.first_block[1], t, xt, vec, lane);
  else if (j == 2u) gemv_block(p.w[2], w2, s2, b2, out2, block - p.first_block[2], t, xt, vec, lane);
  else gemv_block(p.w[3], w3, s3, b3, out3, block - p.first_block[3], t, xt, vec, lane);
}
