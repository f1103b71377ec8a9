// What greedy decoding needs on the GPU: the arg-max of each logits row, so that the next token can
// stay on the device. Two passes (one threadgroup cannot stream a 248k vocabulary fast): the best of
// each slice of the row, then the best of the slices.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// True when (va, ia) beats (vb, ib): a larger value, or an equal one at a lower index. Index
// 0xffffffff is "none yet" and NaNs never win.
inline bool argmax_better(float va, uint ia, float vb, uint ib) {
  if (ia == 0xffffffffu) return false;
  if (ib == 0xffffffffu) return true;
  return va > vb || (va == vb && ia < ib);
}

// The best (value, index) of the threadgroup's candidates, in thread 0.
inline void argmax_reduce(thread float& bv, thread uint& bi, threadgroup float* best_v, threadgroup uint* best_i, uint tid,
                          uint sg, uint lane, uint simdgroups) {
  for (uint off = 16u; off > 0u; off >>= 1u) {
    const float ov = simd_shuffle_xor(bv, off);
    const uint oi = simd_shuffle_xor(bi, off);
    if (argmax_better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0u) {
    best_v[sg] = bv;
    best_i[sg] = bi;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0u)
    for (uint i = 1; i < simdgroups; ++i)
      if (argmax_better(best_v[i], best_i[i], bv, bi)) {
        bv = best_v[i];
        bi = best_i[i];
      }
}

// part_v/part_i[t, part] = the best logit of slice `part` of row t (index 0xffffffff if it holds only
// NaNs); grid (parts, n).
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void argmax_partial(device const float* logits [[buffer(0)]],
                   device float* part_v [[buffer(1)]], device uint* part_i [[buffer(2)]],
                   constant ArgmaxParams& p [[buffer(3)]], uint2 group [[threadgroup_position_in_grid]],
                   uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                   uint lane [[thread_index_in_simdgroup]], uint simdgroups [[simdgroups_per_threadgroup]],
                   uint threads [[threads_per_threadgroup]]) {
  threadgroup float best_v[32];
  threadgroup uint best_i[32];
  const uint part = group.x, t = group.y;
  device const float* row = logits + ulong(t) * p.vocab;
  const uint begin = part * p.part_len, end = min(p.vocab, begin + p.part_len);
  float bv = -INFINITY;
  uint bi = 0xffffffffu;
  float v[ARGMAX_PART_LEN / REDUCE_THREADS];  // clamped loads, issued together (threads = REDUCE_THREADS)
  for (uint m = 0; m < ARGMAX_PART_LEN / REDUCE_THREADS; ++m) v[m] = row[min(begin + tid + m * threads, end - 1u)];
  for (uint m = 0; m < ARGMAX_PART_LEN / REDUCE_THREADS; ++m) {
    const uint i = begin + tid + m * threads;
    if (i < end && (v[m] > bv || (bi == 0xffffffffu && v[m] == bv))) {  // ascending i: the first of equals stays
      bv = v[m];
      bi = i;
    }
  }
  argmax_reduce(bv, bi, best_v, best_i, tid, sg, lane, simdgroups);
  if (tid == 0u) {
    part_v[ulong(t) * p.parts + part] = bv;
    part_i[ulong(t) * p.parts + part] = bi;
  }
}

// ids[t] = the first index of the largest logit of row t (0 if the row holds only NaNs); grid (n).
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void argmax(device const float* part_v [[buffer(0)]],
                   device const uint* part_i [[buffer(1)]], device int* ids [[buffer(2)]],
                   constant ArgmaxParams& p [[buffer(3)]], uint t [[threadgroup_position_in_grid]],
                   uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                   uint lane [[thread_index_in_simdgroup]], uint simdgroups [[simdgroups_per_threadgroup]],
                   uint threads [[threads_per_threadgroup]]) {
  threadgroup float best_v[32];
  threadgroup uint best_i[32];
  float bv = -INFINITY;
  uint bi = 0xffffffffu;
  for (uint i = tid; i < p.parts; i += threads) {
    const float v = part_v[ulong(t) * p.parts + i];
    const uint idx = part_i[ulong(t) * p.parts + i];
    if (argmax_better(v, idx, bv, bi)) {
      bv = v;
      bi = idx;
    }
  }
  argmax_reduce(bv, bi, best_v, best_i, tid, sg, lane, simdgroups);
  if (tid == 0u) ids[t] = bi == 0xffffffffu ? 0 : int(bi);
}
