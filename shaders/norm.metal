// RMSNorm kernels: the plain norm (weights already hold the effective gain, 1+w for the zero-centred
// convention) and the DeltaNet gated norm.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// Row kernels keep their values in registers and load them in loops of constant trip count, so that
// all of a thread's loads are in flight at once (a loop that waits for each load in turn costs a
// memory latency per iteration: several microseconds per norm).

// out[r] = x[r] * rsqrt(mean(x[r]²) + eps) * weight; one threadgroup of NORM_THREADS per row (dim <=
// NORM_THREADS * NORM_MAX_PER_THREAD); in place allowed (each thread writes only what it read).
[[max_total_threads_per_threadgroup(NORM_THREADS)]] kernel void rms_norm(device const float* x [[buffer(0)]], device const float* weight [[buffer(1)]],
                     device float* out [[buffer(2)]], constant NormParams& p [[buffer(3)]],
                     uint row [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                     uint simdgroups [[simdgroups_per_threadgroup]],
                     uint threads [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  device const float* xr = x + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  float v[NORM_MAX_PER_THREAD], wv[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = min(tid + k * threads, p.dim - 1u);
    v[k] = xr[i];
    wv[k] = p.has_weight != 0u ? weight[i] : 1.0f;
  }
  float ss = 0.0f;
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) ss += tid + k * threads < p.dim ? v[k] * v[k] : 0.0f;
  const float total = threadgroup_sum(ss, scratch, sg, lane, simdgroups);
  const float inv = 1.0f / sqrt(total / float(p.dim) + p.eps);
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = tid + k * threads;
    if (i < p.dim) o[i] = v[k] * inv * wv[k];
  }
}

// The residual add fused with the norm that follows it: h[r] += scale * a[r], then
// out[r] = h[r] * rsqrt(mean(h[r]²) + eps) * weight; one threadgroup of NORM_THREADS per row.
[[max_total_threads_per_threadgroup(NORM_THREADS)]] kernel void add_rms_norm(
    device float* h [[buffer(0)]], device const float* a [[buffer(1)]], device const float* weight [[buffer(2)]],
    device float* out [[buffer(3)]], constant AddNormParams& p [[buffer(4)]], uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]], uint simdgroups [[simdgroups_per_threadgroup]],
    uint threads [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  device float* hr = h + ulong(row) * p.dim;
  device const float* ar = a + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  float v[NORM_MAX_PER_THREAD], add[NORM_MAX_PER_THREAD], wv[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = min(tid + k * threads, p.dim - 1u);
    v[k] = hr[i];
    add[k] = ar[i];
    wv[k] = p.has_weight != 0u ? weight[i] : 1.0f;
  }
  float ss = 0.0f;
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    v[k] += p.scale * add[k];
    ss += tid + k * threads < p.dim ? v[k] * v[k] : 0.0f;
  }
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = tid + k * threads;
    if (i < p.dim) hr[i] = v[k];
  }
  const float total = threadgroup_sum(ss, scratch, sg, lane, simdgroups);
  const float inv = 1.0f / sqrt(total / float(p.dim) + p.eps);
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = tid + k * threads;
    if (i < p.dim) o[i] = v[k] * inv * wv[k];
  }
}

// out[r] = weight * (x[r] * rsqrt(mean(x[r]²) + eps)) * silu(z[r]) per row of `dim` (a value head,
// dim <= 32 * NORM_MAX_PER_THREAD); one simdgroup per row, ROWS_PER_THREADGROUP rows per threadgroup;
// in place allowed.
[[max_total_threads_per_threadgroup(ROW_THREADS)]] kernel void gated_rms_norm(device const float* x [[buffer(0)]], device const float* z [[buffer(1)]],
                           device const float* weight [[buffer(2)]], device float* out [[buffer(3)]],
                           constant NormParams& p [[buffer(4)]], uint group [[threadgroup_position_in_grid]],
                           uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  const uint row = group * ROWS_PER_THREADGROUP + sg;
  if (row >= p.rows) return;
  device const float* xr = x + ulong(row) * p.dim;
  device const float* zr = z + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  float v[NORM_MAX_PER_THREAD], g[NORM_MAX_PER_THREAD], wv[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = min(lane + 32u * k, p.dim - 1u);
    v[k] = xr[i];
    g[k] = zr[i];
    wv[k] = weight[i];
  }
  float ss = 0.0f;
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) ss += lane + 32u * k < p.dim ? v[k] * v[k] : 0.0f;
  const float inv = 1.0f / sqrt(simd_sum(ss) / float(p.dim) + p.eps);
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = lane + 32u * k;
    if (i < p.dim) o[i] = wv[k] * (v[k] * inv) * silu(g[k]);
  }
}
