// Matrix-vector products with fused dequantisation (MLX affine 4/8-bit, or dense bf16/f16/f32 rows),
// fp32 accumulation: the projections, the router, the shared expert and the lm_head.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// Block `group.x` of the rows of all jobs for token t = group.y: out_j[t, r] = W_j[r] · x for up to
// GEMV_MAX_JOBS matrices that read the same input row x (fused projections: one launch). The rows of
// all jobs form blocks of GEMV_ROWS, numbered consecutively; p.split simdgroups share a block (split-K:
// each takes every p.split-th group of 32 words, and the first adds the parts up through threadgroup
// memory), so that a small matrix still keeps many simdgroups loading. With p.residual (one job) the
// output is also added to the residual stream: residual[t, r] += residual_scale · out[t, r].
template <class X>
inline void gemv_rows(device const uchar* w0, device const uchar* s0, device const uchar* b0, device float* out0,
                      device const uchar* w1, device const uchar* s1, device const uchar* b1, device float* out1,
                      device const uchar* w2, device const uchar* s2, device const uchar* b2, device float* out2,
                      device const uchar* w3, device const uchar* s3, device const uchar* b3, device float* out3,
                      X xt, device float* residual, constant GemvParams& p, uint2 group, uint sg, uint lane,
                      threadgroup float* partial) {
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
  device float* res = residual + ulong(t) * rows;
  const uint count = live ? min(GEMV_ROWS, rows - row0) : 0u;
  float acc[GEMV_ROWS];
  for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] = 0.0f;
  if (live) {
    if (j == 0u) rows_dot(p.w[0], w0, s0, b0, row0, count, xt, lane, part, parts, acc);
    else if (j == 1u) rows_dot(p.w[1], w1, s1, b1, row0, count, xt, lane, part, parts, acc);
    else if (j == 2u) rows_dot(p.w[2], w2, s2, b2, row0, count, xt, lane, part, parts, acc);
    else rows_dot(p.w[3], w3, s3, b3, row0, count, xt, lane, part, parts, acc);
  }
  if (parts == 1u) {
    for (uint r = 0; r < GEMV_ROWS; ++r) {
      const float v = simd_sum(acc[r]);
      if (lane == 0u && r < count) {
        out[row0 + r] = v;
        if (p.residual != 0u) res[row0 + r] = res[row0 + r] + p.residual_scale * v;
      }
    }
    return;
  }
  const float v = block_rows_sum(acc, partial, sg, lane, parts);
  if (part == 0u && lane < count) {
    out[row0 + lane] = v;
    if (p.residual != 0u) res[row0 + lane] = res[row0 + lane] + p.residual_scale * v;
  }
}

// gemv_rows of x [n, cols]; grid (ceil(total_blocks · split / GEMV_SIMDGROUPS), n).
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void gemv(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                 device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                 device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                 device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                 device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                 device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                 device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                 device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                 device const float* x [[buffer(16)]], device float* residual [[buffer(17)]],
                 constant GemvParams& p [[buffer(18)]],
                 uint2 group [[threadgroup_position_in_grid]], uint sg [[simdgroup_index_in_threadgroup]],
                 uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[GEMV_SIMDGROUPS * GEMV_ROWS];
  gemv_rows(w0, s0, b0, out0, w1, s1, b1, out1, w2, s2, b2, out2, w3, s3, b3, out3,
            DeviceRow{x + ulong(group.y) * p.cols, p.x_vec4 != 0u}, residual, p, group, sg, lane, partial);
}

// The RMSNorm that feeds the projections, folded into them: every threadgroup normalises its token's
// row of x [n, cols] (cols <= GEMV_NORM_MAX_COLS) into threadgroup memory and runs gemv_rows on it;
// the threadgroups of block 0 also write the normed rows to norm_out for the kernels that follow.
// Plain (the layers' RMSNorm): x · rsqrt(mean(x²) + eps) · norm_weight over the whole row. Gated
// (p.norm_gated, DeltaNet's gated norm): each group of p.norm_group columns (a value head) normed on
// its own, norm_weight [norm_group] · (x · rsqrt(mean(x²) + eps)) · silu(norm_gate), as gated_rms_norm
// sums it. Loads in loops of constant trip count (clamped), as the norm kernels'. Same grid as gemv.
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void gemv_norm(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                 device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                 device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                 device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                 device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                 device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                 device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                 device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                 device const float* x [[buffer(16)]], device float* residual [[buffer(17)]],
                 constant GemvParams& p [[buffer(18)]], device const float* norm_weight [[buffer(19)]],
                 device float* norm_out [[buffer(20)]], device const float* norm_gate [[buffer(21)]],
                 uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                 uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                 uint simdgroups [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[GEMV_SIMDGROUPS * GEMV_ROWS];
  threadgroup float scratch[32];
  threadgroup float group_inv[GEMV_NORM_MAX_COLS / 32u];
  threadgroup float4 staged4[GEMV_NORM_MAX_COLS / 4u];
  threadgroup float* staged = (threadgroup float*)staged4;
  const uint t = group.y, cols = p.cols, g = p.norm_group;
  const bool gated = p.norm_gated != 0u;
  device const float* xt = x + ulong(t) * cols;
  float ss = 0.0f;
  for (uint k = 0; k < GEMV_NORM_MAX_COLS / GEMV_THREADS; ++k) {
    const uint i = tid + k * GEMV_THREADS;
    const float v = xt[min(i, cols - 1u)];
    ss += i < cols ? v * v : 0.0f;
    staged[i] = i < cols ? v : 0.0f;
  }
  // The row's sum of squares; its barriers also make the staged row visible to every thread.
  const float row_inv = 1.0f / sqrt(threadgroup_sum(ss, scratch, sg, lane, simdgroups) / float(cols) + p.norm_eps);
  if (gated) {  // each simdgroup sums whole groups, lane-strided as gated_rms_norm
    for (uint q = sg; q < cols / g; q += simdgroups) {
      float gs = 0.0f;
      for (uint i = lane; i < g; i += 32u) gs += staged[q * g + i] * staged[q * g + i];
      const float inv = 1.0f / sqrt(simd_sum(gs) / float(g) + p.norm_eps);
      if (lane == 0u) group_inv[q] = inv;
    }
  } else if (tid == 0u) {
    group_inv[0] = row_inv;  // the whole row is one group
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  device float* normed = norm_out + ulong(t) * cols;
  for (uint k = 0; k < GEMV_NORM_MAX_COLS / GEMV_THREADS; ++k) {
    const uint i = tid + k * GEMV_THREADS, c = min(i, cols - 1u);
    const float inv = group_inv[gated ? c / g : 0u];
    const float wv = p.norm_has_weight != 0u ? norm_weight[gated ? c % g : c] : 1.0f;
    const float zv = norm_gate[gated ? ulong(t) * cols + c : 0ul];  // unconditional: the dummy when not gated
    const float v = gated ? wv * (staged[i] * inv) * silu(zv) : staged[i] * inv * wv;
    staged[i] = i < cols ? v : 0.0f;
    if (group.x == 0u && i < cols) normed[i] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  gemv_rows(w0, s0, b0, out0, w1, s1, b1, out1, w2, s2, b2, out2, w3, s3, b3, out3, ThreadgroupRow{staged}, residual,
            p, group, sg, lane, partial);
}
