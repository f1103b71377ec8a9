// RMSNorm kernels: the plain norm (weights already hold the effective gain, 1+w for the zero-centred
// convention) and the DeltaNet gated norm.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// out[r] = x[r] * rsqrt(mean(x[r]²) + eps) * weight; one threadgroup of REDUCE_THREADS per row; in place
// allowed (each thread writes only what it read, after the reduction).
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void rms_norm(device const float* x [[buffer(0)]], device const float* weight [[buffer(1)]],
                     device float* out [[buffer(2)]], constant NormParams& p [[buffer(3)]],
                     uint row [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                     uint simdgroups [[simdgroups_per_threadgroup]],
                     uint threads [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  device const float* xr = x + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  float ss = 0.0f;
  for (uint i = tid; i < p.dim; i += threads) ss += xr[i] * xr[i];
  const float total = threadgroup_sum(ss, scratch, sg, lane, simdgroups);
  const float inv = 1.0f / sqrt(total / float(p.dim) + p.eps);
  for (uint i = tid; i < p.dim; i += threads) o[i] = xr[i] * inv * (p.has_weight != 0u ? weight[i] : 1.0f);
}

// The residual add fused with the norm that follows it: h[r] += scale * a[r], then
// out[r] = h[r] * rsqrt(mean(h[r]²) + eps) * weight; one threadgroup of REDUCE_THREADS per row.
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void add_rms_norm(
    device float* h [[buffer(0)]], device const float* a [[buffer(1)]], device const float* weight [[buffer(2)]],
    device float* out [[buffer(3)]], constant AddNormParams& p [[buffer(4)]], uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]], uint simdgroups [[simdgroups_per_threadgroup]],
    uint threads [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  device float* hr = h + ulong(row) * p.dim;
  device const float* ar = a + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  float ss = 0.0f;
  for (uint i = tid; i < p.dim; i += threads) {
    const float v = hr[i] + p.scale * ar[i];
    hr[i] = v;
    ss += v * v;
  }
  const float total = threadgroup_sum(ss, scratch, sg, lane, simdgroups);
  const float inv = 1.0f / sqrt(total / float(p.dim) + p.eps);
  for (uint i = tid; i < p.dim; i += threads) o[i] = hr[i] * inv * (p.has_weight != 0u ? weight[i] : 1.0f);
}

// out[r] = weight * (x[r] * rsqrt(mean(x[r]²) + eps)) * silu(z[r]) per row of `dim` (a value head);
// one simdgroup per row, ROWS_PER_THREADGROUP rows per threadgroup; in place allowed.
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void gated_rms_norm(device const float* x [[buffer(0)]], device const float* z [[buffer(1)]],
                           device const float* weight [[buffer(2)]], device float* out [[buffer(3)]],
                           constant NormParams& p [[buffer(4)]], uint group [[threadgroup_position_in_grid]],
                           uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  const uint row = group * ROWS_PER_THREADGROUP + sg;
  if (row >= p.rows) return;
  device const float* xr = x + ulong(row) * p.dim;
  device const float* zr = z + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  float ss = 0.0f;
  for (uint i = lane; i < p.dim; i += 32u) ss += xr[i] * xr[i];
  const float inv = 1.0f / sqrt(simd_sum(ss) / float(p.dim) + p.eps);
  for (uint i = lane; i < p.dim; i += 32u) o[i] = weight[i] * (xr[i] * inv) * silu(zr[i]);
}
