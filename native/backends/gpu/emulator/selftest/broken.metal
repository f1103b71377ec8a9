// Kernels that break the rules of the portable MSL subset, one rule each: the emulator must reject or
// expose every one of them (selftest.cpp). Not part of the product.
#include <metal_stdlib>
using namespace metal;

// out[i] = tile[i - 1] without a barrier between the write and the read: right by luck when the threads
// run in forward order, NaN (the poison) in reverse order.
kernel void missing_barrier(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[i] = float(i);
  out[i] = i > 0u ? tile[i - 1u] : 0.0f;
}

// The same with the barrier: right in every order.
kernel void with_barrier(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[i] = float(i);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = i > 0u ? tile[i - 1u] : 0.0f;
}

// Half the threadgroup returns before a barrier the other half waits at.
kernel void barrier_not_reached(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  if (i >= 32u) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = 1.0f;
}

// Two halves wait at two different barriers.
kernel void two_barriers(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  if (i < 32u) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[i] = 1.0f;
}

// A simd collective reached by half of the simdgroup (fine on Apple GPUs, not with CUDA's full mask).
kernel void divergent_simd_sum(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  float v = 1.0f;
  if (lane < 16u) v = simd_sum(v);
  out[lane] = v;
}

// A simd collective while the other lanes wait at a barrier.
kernel void simd_sum_against_barrier(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  float v = 1.0f;
  if (lane < 16u) v = simd_sum(v);
  else threadgroup_barrier(mem_flags::mem_threadgroup);
  out[lane] = v;
}

// 36,000 bytes of threadgroup memory.
kernel void too_much_threadgroup_memory(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float big[9000];
  big[i] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = big[i];
}

// simd_shuffle from a lane that does not exist.
kernel void shuffle_out_of_range(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  out[lane] = simd_shuffle(1.0f, ushort(40));
}

// The collectives themselves, for their results: sum, max, prefix sum, shuffles, broadcast.
kernel void collectives(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  const float v = float(lane);
  out[lane] = simd_sum(v);
  out[32u + lane] = simd_max(v);
  out[64u + lane] = simd_prefix_exclusive_sum(v);
  out[96u + lane] = simd_shuffle_down(v, ushort(3));
  out[128u + lane] = simd_shuffle_xor(v, ushort(5));
  out[160u + lane] = simd_broadcast(v, ushort(7));
}

// A 16-byte vector read through a pointer that is only 4-byte aligned.
kernel void misaligned_vector_load(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  const float4 v = ((device const float4*)(out + 1))[0];
  out[lane] = v.x;
}
