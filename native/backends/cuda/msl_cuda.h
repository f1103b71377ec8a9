// The portable MSL subset as CUDA, for the kernels msl-translate writes from shaders/*.metal: address
// spaces are gone (generic pointers), threadgroup arrays are __shared__, threadgroup_barrier is
// __syncthreads, simd collectives are full-mask warp shuffles (the subset requires all 32 lanes to
// reach them, which is what makes this mapping valid), and the builtins come from threadIdx/blockIdx.
// Math on floats uses CUDA's own overloads (exp, sqrt, max...); only what CUDA lacks is added here.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <cstdint>
#include <cstring>

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef __half half;

#ifndef MAXFLOAT
#define MAXFLOAT 3.402823466e+38f
#endif

namespace metal {

enum class mem_flags : int { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
__host__ __device__ inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }

__device__ inline void threadgroup_barrier(mem_flags) { __syncthreads(); }
__device__ inline void simdgroup_barrier(mem_flags) { __syncwarp(); }

template <class T, class U>
__device__ inline T as_type(U v) {
  static_assert(sizeof(T) == sizeof(U), "as_type needs equal sizes");
  T t;
  memcpy(&t, &v, sizeof(T));
  return t;
}
template <>
__device__ inline half as_type<half, ushort>(ushort v) {
  return __ushort_as_half(v);
}

constexpr unsigned kFullMask = 0xffffffffu;

template <class T>
__device__ inline T simd_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
template <class T>
__device__ inline T simd_product(T v) {
  for (int o = 16; o > 0; o >>= 1) v *= __shfl_xor_sync(kFullMask, v, o);
  return v;
}
template <class T>
__device__ inline T simd_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <class T>
__device__ inline T simd_min(T v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <class T>
__device__ inline T simd_prefix_inclusive_sum(T v) {
  const int lane = threadIdx.x & 31;
  for (int o = 1; o < 32; o <<= 1) {
    const T u = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += u;
  }
  return v;
}
template <class T>
__device__ inline T simd_prefix_exclusive_sum(T v) {
  return simd_prefix_inclusive_sum(v) - v;
}
template <class T>
__device__ inline T simd_shuffle(T v, ushort lane) {
  return __shfl_sync(kFullMask, v, lane);
}
template <class T>
__device__ inline T simd_shuffle_down(T v, ushort delta) {
  return __shfl_down_sync(kFullMask, v, delta);
}
template <class T>
__device__ inline T simd_shuffle_up(T v, ushort delta) {
  return __shfl_up_sync(kFullMask, v, delta);
}
template <class T>
__device__ inline T simd_shuffle_xor(T v, ushort mask) {
  return __shfl_xor_sync(kFullMask, v, mask);
}
template <class T>
__device__ inline T simd_broadcast(T v, ushort lane) {
  return __shfl_sync(kFullMask, v, lane);
}
template <class T>
__device__ inline T simd_broadcast_first(T v) {
  return __shfl_sync(kFullMask, v, 0);
}
__device__ inline bool simd_all(bool v) { return __all_sync(kFullMask, v); }
__device__ inline bool simd_any(bool v) { return __any_sync(kFullMask, v); }

__device__ inline float clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
__device__ inline int clamp(int x, int lo, int hi) { return min(max(x, lo), hi); }
__device__ inline uint clamp(uint x, uint lo, uint hi) { return min(max(x, lo), hi); }
__device__ inline float select(float a, float b, bool c) { return c ? b : a; }
__device__ inline int select(int a, int b, bool c) { return c ? b : a; }
__device__ inline uint select(uint a, uint b, bool c) { return c ? b : a; }
__device__ inline float mix(float a, float b, float t) { return a + (b - a) * t; }

// precise:: is CUDA's default math (not the intrinsics); fast:: the intrinsics.
namespace precise {
__device__ inline float exp(float x) { return ::expf(x); }
__device__ inline float log(float x) { return ::logf(x); }
__device__ inline float sqrt(float x) { return ::sqrtf(x); }
__device__ inline float rsqrt(float x) { return ::rsqrtf(x); }
__device__ inline float sin(float x) { return ::sinf(x); }
__device__ inline float cos(float x) { return ::cosf(x); }
__device__ inline float tanh(float x) { return ::tanhf(x); }
__device__ inline float pow(float x, float y) { return ::powf(x, y); }
}  // namespace precise
namespace fast {
__device__ inline float exp(float x) { return __expf(x); }
__device__ inline float log(float x) { return __logf(x); }
__device__ inline float sqrt(float x) { return ::sqrtf(x); }
__device__ inline float rsqrt(float x) { return ::rsqrtf(x); }
__device__ inline float sin(float x) { return __sinf(x); }
__device__ inline float cos(float x) { return __cosf(x); }
__device__ inline float tanh(float x) { return ::tanhf(x); }
__device__ inline float pow(float x, float y) { return __powf(x, y); }
}  // namespace fast

}  // namespace metal

namespace msl_cuda {

__device__ inline uint linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
__device__ inline uint3 thread_position_in_grid() {
  return make_uint3(blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y,
                    blockIdx.z * blockDim.z + threadIdx.z);
}
__device__ inline uint3 threadgroup_position_in_grid() { return blockIdx; }
__device__ inline uint3 thread_position_in_threadgroup() { return threadIdx; }
__device__ inline uint3 threads_per_threadgroup() { return make_uint3(blockDim.x, blockDim.y, blockDim.z); }
__device__ inline uint3 threadgroups_per_grid() { return make_uint3(gridDim.x, gridDim.y, gridDim.z); }
__device__ inline uint3 threads_per_grid() {
  return make_uint3(gridDim.x * blockDim.x, gridDim.y * blockDim.y, gridDim.z * blockDim.z);
}
__device__ inline uint thread_index_in_threadgroup() { return linear_thread(); }
__device__ inline uint simdgroup_index_in_threadgroup() { return linear_thread() / 32u; }
__device__ inline uint thread_index_in_simdgroup() { return linear_thread() % 32u; }
__device__ inline uint simdgroups_per_threadgroup() { return (blockDim.x * blockDim.y * blockDim.z + 31u) / 32u; }
__device__ inline uint threads_per_simdgroup() { return 32u; }

// Every kernel starts here. Launched as a programmatic dependent of the previous kernel (the runtime's
// default, Hopper and later), a kernel's blocks may start before that kernel has finished: they wait
// here until it has, and its writes are visible. Then they let the next kernel launch, so that its
// launch latency overlaps this kernel's work (at most two kernels in flight). Launched plainly, both
// are no-ops.
__device__ inline void await_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

template <class T>
__device__ inline T builtin(uint3 v);
template <class T>
__device__ inline T builtin(uint v);
template <>
__device__ inline uint builtin<uint>(uint v) { return v; }
template <>
__device__ inline ushort builtin<ushort>(uint v) { return ushort(v); }
template <>
__device__ inline uint builtin<uint>(uint3 v) { return v.x; }
template <>
__device__ inline ushort builtin<ushort>(uint3 v) { return ushort(v.x); }
template <>
__device__ inline uint2 builtin<uint2>(uint3 v) { return make_uint2(v.x, v.y); }
template <>
__device__ inline uint3 builtin<uint3>(uint3 v) { return v; }

}  // namespace msl_cuda
