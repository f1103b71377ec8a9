// Matrix-vector products with fused dequantisation (MLX affine 4/8-bit, or dense bf16/f16/f32 rows),
// fp32 accumulation: the projections, the router, the shared expert and the lm_head.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// out_j[t, r] = W_j[r] · x[t] for up to GEMV_MAX_JOBS matrices that read the same input x [n, cols]
// (fused projections: one launch). One simdgroup per output row; rows of all jobs are numbered
// consecutively; grid (ceil(total_rows / ROWS_PER_THREADGROUP), n).
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
  uint row = group.x * ROWS_PER_THREADGROUP + sg;
  const uint t = group.y;
  if (row >= p.total_rows) return;
  uint j = 0;
  while (j + 1u < p.jobs && row >= p.w[j].rows) {
    row -= p.w[j].rows;
    ++j;
  }
  device const float* xt = x + ulong(t) * p.cols;
  const bool vec = p.x_vec4 != 0u;
  float v;
  device float* out;
  if (j == 0u) {
    v = row_dot(p.w[0], w0, s0, b0, row, xt, vec, lane);
    out = out0;
  } else if (j == 1u) {
    v = row_dot(p.w[1], w1, s1, b1, row, xt, vec, lane);
    out = out1;
  } else if (j == 2u) {
    v = row_dot(p.w[2], w2, s2, b2, row, xt, vec, lane);
    out = out2;
  } else {
    v = row_dot(p.w[3], w3, s3, b3, row, xt, vec, lane);
    out = out3;
  }
  if (lane == 0u) out[ulong(t) * p.w[j].rows + row] = v;
}
