// What greedy decoding needs on the GPU: the arg-max of each logits row, so that the next token can
// stay on the device.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// ids[t] = the first index of the largest logit of row t (NaNs never win); one threadgroup per row.
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void argmax(device const float* logits [[buffer(0)]], device int* ids [[buffer(1)]],
                   constant ArgmaxParams& p [[buffer(2)]], uint t [[threadgroup_position_in_grid]],
                   uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                   uint lane [[thread_index_in_simdgroup]], uint simdgroups [[simdgroups_per_threadgroup]],
                   uint threads [[threads_per_threadgroup]]) {
  threadgroup float best_v[32];
  threadgroup uint best_i[32];
  device const float* row = logits + ulong(t) * p.vocab;
  float bv = -INFINITY;
  uint bi = 0xffffffffu;
  for (uint i = tid; i < p.vocab; i += threads) {
    const float v = row[i];
    if (v > bv || (bi == 0xffffffffu && v == bv)) {
      bv = v;
      bi = i;
    }
  }
  for (uint off = 16u; off > 0u; off >>= 1u) {
    const float ov = simd_shuffle_xor(bv, off);
    const uint oi = simd_shuffle_xor(bi, off);
    if (oi != 0xffffffffu && (bi == 0xffffffffu || ov > bv || (ov == bv && oi < bi))) {
      bv = ov;
      bi = oi;
    }
  }
  if (lane == 0u) {
    best_v[sg] = bv;
    best_i[sg] = bi;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0u) {
    for (uint i = 1; i < simdgroups; ++i) {
      const float ov = best_v[i];
      const uint oi = best_i[i];
      if (oi != 0xffffffffu && (bi == 0xffffffffu || ov > bv || (ov == bv && oi < bi))) {
        bv = ov;
        bi = oi;
      }
    }
    ids[t] = bi == 0xffffffffu ? 0 : int(bi);
  }
}
