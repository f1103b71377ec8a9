// RMSNorm kernels: the plain norm (weights already hold the effective gain, 1+w for the zero-centred
// convention) and the DeltaNet gated norm.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// Row kernels keep their values in registers and load them in loops of constant trip count, so that
// all of a thread's loads are in flight at once (a loop that waits for each load in turn costs a
// memory latency per iteration: several microseconds per norm). The norm's weights are loaded before
// await_inputs(): with CUDA while the previous kernel still runs.

// A row kernel's output o[i] = v[k] · inv · wv[k] (i = tid + k · threads), and with int16 its int16 blocks
// (a simdgroup's lanes hold a block of 32 columns for each k; threads and dim are multiples of
// INT16_BLOCK). The blocks of every k are reduced together (store_blocks8_int16), which keeps the
// shuffles on the norm's critical path few.
static_assert(NORM_MAX_PER_THREAD == 8u, "store_blocks8_int16 takes the 8 values of a thread");
inline void store_normed(thread const float* v, thread const float* wv, float inv, device float* o, device ushort* xq,
                         device float* de, bool int16, uint row, uint dim, uint tid, uint threads, uint sg, uint lane) {
  float y[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = tid + k * threads;
    y[k] = v[k] * inv * wv[k];
    if (i < dim) o[i] = y[k];
  }
  if (!int16) return;
  ulong block[NORM_MAX_PER_THREAD];
  bool live[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint first = k * threads + INT16_BLOCK * sg;  // the simdgroup's block
    live[k] = first < dim;
    block[k] = (ulong(row) * dim + first) / INT16_BLOCK;
  }
  store_blocks8_int16(y, live, block, xq, de, lane);
}

// out[r] = x[r] * rsqrt(mean(x[r]²) + eps) * weight; one threadgroup of NORM_THREADS per row (dim <=
// NORM_THREADS * NORM_MAX_PER_THREAD); in place allowed (each thread writes only what it read).
[[max_total_threads_per_threadgroup(NORM_THREADS)]] kernel void rms_norm(device const float* x [[buffer(0)]], device const float* weight [[buffer(1)]],
                     device float* out [[buffer(2)]], constant NormParams& p [[buffer(3)]],
                     device ushort* xq [[buffer(4)]], device float* de [[buffer(5)]],
                     uint row [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                     uint simdgroups [[simdgroups_per_threadgroup]],
                     uint threads [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  device const float* xr = x + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  float v[NORM_MAX_PER_THREAD], wv[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) wv[k] = p.has_weight != 0u ? weight[min(tid + k * threads, p.dim - 1u)] : 1.0f;
  await_inputs();
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) v[k] = xr[min(tid + k * threads, p.dim - 1u)];
  float ss = 0.0f;
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) ss += tid + k * threads < p.dim ? v[k] * v[k] : 0.0f;
  const float total = threadgroup_sum(ss, scratch, sg, lane, simdgroups);
  const float inv = 1.0f / sqrt(total / float(p.dim) + p.eps);
  store_normed(v, wv, inv, o, xq, de, p.int16 != 0u, row, p.dim, tid, threads, sg, lane);
}

// The residual add fused with the norm that follows it: h[r] += scale * a[r], then
// out[r] = h[r] * rsqrt(mean(h[r]²) + eps) * weight; one threadgroup of NORM_THREADS per row.
[[max_total_threads_per_threadgroup(NORM_THREADS)]] kernel void add_rms_norm(
    device float* h [[buffer(0)]], device const float* a [[buffer(1)]], device const float* weight [[buffer(2)]],
    device float* out [[buffer(3)]], constant AddNormParams& p [[buffer(4)]], device ushort* xq [[buffer(5)]],
    device float* de [[buffer(6)]], uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]], uint simdgroups [[simdgroups_per_threadgroup]],
    uint threads [[threads_per_threadgroup]]) {
  threadgroup float scratch[32];
  device float* hr = h + ulong(row) * p.dim;
  device const float* ar = a + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  float v[NORM_MAX_PER_THREAD], add[NORM_MAX_PER_THREAD], wv[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) wv[k] = p.has_weight != 0u ? weight[min(tid + k * threads, p.dim - 1u)] : 1.0f;
  await_inputs();
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = min(tid + k * threads, p.dim - 1u);
    v[k] = hr[i];
    add[k] = ar[i];
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
  store_normed(v, wv, inv, o, xq, de, p.int16 != 0u, row, p.dim, tid, threads, sg, lane);
}

// out[r] = weight * (x[r] * rsqrt(mean(x[r]²) + eps)) * silu(z[r]) per row of `dim` (a value head,
// dim <= 32 * NORM_MAX_PER_THREAD); one simdgroup per row, ROWS_PER_THREADGROUP rows per threadgroup;
// in place allowed.
[[max_total_threads_per_threadgroup(ROW_THREADS)]] kernel void gated_rms_norm(device const float* x [[buffer(0)]], device const float* z [[buffer(1)]],
                           device const float* weight [[buffer(2)]], device float* out [[buffer(3)]],
                           constant NormParams& p [[buffer(4)]], device ushort* xq [[buffer(5)]],
                           device float* de [[buffer(6)]], uint group [[threadgroup_position_in_grid]],
                           uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  const uint row = group * ROWS_PER_THREADGROUP + sg;
  float v[NORM_MAX_PER_THREAD], g[NORM_MAX_PER_THREAD], wv[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) wv[k] = weight[min(lane + 32u * k, p.dim - 1u)];
  await_inputs();
  if (row >= p.rows) return;
  device const float* xr = x + ulong(row) * p.dim;
  device const float* zr = z + ulong(row) * p.dim;
  device float* o = out + ulong(row) * p.dim;
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = min(lane + 32u * k, p.dim - 1u);
    v[k] = xr[i];
    g[k] = zr[i];
  }
  float ss = 0.0f;
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) ss += lane + 32u * k < p.dim ? v[k] * v[k] : 0.0f;
  const float inv = 1.0f / sqrt(simd_sum(ss) / float(p.dim) + p.eps);
  float y[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    const uint i = lane + 32u * k;
    y[k] = wv[k] * (v[k] * inv) * silu(g[k]);
    if (i < p.dim) o[i] = y[k];
  }
  if (p.int16 == 0u) return;
  ulong block[NORM_MAX_PER_THREAD];
  bool live[NORM_MAX_PER_THREAD];
  for (uint k = 0; k < NORM_MAX_PER_THREAD; ++k) {
    live[k] = 32u * k < p.dim;
    block[k] = (ulong(row) * p.dim + 32u * k) / INT16_BLOCK;
  }
  store_blocks8_int16(y, live, block, xq, de, lane);
}
