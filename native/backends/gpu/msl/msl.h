// The portable subset of the Metal Shading Language, for the kernels msl-translate writes from
// shaders/*.metal: one header, two targets.
//
// - The CPU emulator (plain C++): every GPU thread runs as a fiber; fibers switch only at threadgroup
//   barriers and simdgroup collectives, where the scheduler (emulator/emulator.cpp) checks that every
//   thread of the threadgroup (barriers) or all 32 lanes of the simdgroup (collectives) arrive at the
//   same call site. With clang and MOELENS_MSL_STRICT, `device`, `constant` and `threadgroup` are
//   distinct address spaces, so mixing them up is a compile error as with Apple's compiler; otherwise
//   (g++) they are plain qualifiers.
// - CUDA (nvcc): address spaces are gone (msl-translate rewrote them; pointers are generic),
//   threadgroup arrays are __shared__, threadgroup_barrier is __syncthreads, simd collectives are
//   full-mask warp shuffles or, for 32-bit integer maxima and minima from sm_80, one redux instruction
//   (the subset requires all 32 lanes to reach them, which is what makes this mapping valid), and the
//   builtins come from threadIdx/blockIdx.
//
// What both targets share is written once below; each target section holds only what differs.
#pragma once

#if defined(__CUDACC__)
#define MSL_TARGET_CUDA 1
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <cstdint>
#include <cstring>
// A function of the MSL library: device code in CUDA, plain C++ in the emulator.
#define MSL_FN __device__ inline
#define MSL_HOST_FN __host__ __device__ inline
#else
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "../../../core/dtype.h"
#include "../launch.h"
#define MSL_FN inline
#define MSL_HOST_FN inline
#endif

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
static_assert(sizeof(ulong) == 8, "MSL's ulong is 64-bit");

#ifndef MAXFLOAT
#define MAXFLOAT 3.402823466e+38f
#endif

#if defined(MSL_TARGET_CUDA)
typedef __half half;
#else
// ---- address spaces ----
#if defined(MOELENS_MSL_STRICT)
#if !defined(__clang__)
#error "MOELENS_MSL_STRICT needs clang (address_space attributes)"
#endif
#define MSL_AS_DEVICE __attribute__((address_space(1)))
#define MSL_AS_CONSTANT __attribute__((address_space(2)))
#define MSL_AS_THREADGROUP __attribute__((address_space(3)))
#else
#define MSL_AS_DEVICE
#define MSL_AS_CONSTANT
#define MSL_AS_THREADGROUP
#endif

// ---- scalar and vector types ----

#if defined(MOELENS_MSL_STRICT)
// The strict check only compiles: a scalar half lives in any address space, as on a GPU (a struct
// could not be assigned through a threadgroup or device pointer there).
typedef _Float16 half;
#else
struct half {
  uint16_t bits = 0;
  half() = default;
  half(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }

  static float to_float(uint16_t h) { return moelens::f16_to_f32(h); }
  static uint16_t from_float(float f) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to infinity
    if (a < 0x38800000u) {  // subnormal or zero in half
      if (a < 0x33000000u) return sign;
      const uint32_t man = (a & 0x7fffffu) | 0x800000u;  // value = man * 2^(e-150); unit 2^-24
      const int shift = 126 - int(a >> 23);
      uint32_t v = man >> shift;
      const uint32_t rem = man & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (v & 1u))) ++v;
      return uint16_t(sign | v);
    }
    uint32_t v = ((a >> 23) - 127 + 15) << 10 | ((a >> 13) & 0x3ffu);
    const uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) ++v;
    return uint16_t(sign | v);
  }
};
#endif

namespace msl_emu {
// A vector read from or written through a misaligned address (fine on x86, a fault or garbage on a GPU).
[[noreturn]] void misaligned_vector(uintptr_t address, size_t alignment);
// A simdgroup call given a lane index that is not the caller's.
[[noreturn]] void wrong_lane(uint32_t passed, uint32_t lane);
}  // namespace msl_emu

// MSL vectors: 2 components aligned to 2 elements, 3 and 4 components to 4 (float3 is 16 bytes).
// Copies check the source's alignment: a cast of a misaligned device pointer to a vector type is an
// error here, as it is on a GPU.
template <class T, int N>
struct msl_vec;

#define MSL_VEC_COMMON(N)                                                                        \
  msl_vec() = default;                                                                         \
  T& operator[](int i) { return (&x)[i]; }                                                     \
  const T& operator[](int i) const { return (&x)[i]; }                                         \
  friend msl_vec operator+(msl_vec a, const msl_vec& b) { for (int i = 0; i < N; ++i) a[i] += b[i]; return a; } \
  friend msl_vec operator-(msl_vec a, const msl_vec& b) { for (int i = 0; i < N; ++i) a[i] -= b[i]; return a; } \
  friend msl_vec operator*(msl_vec a, const msl_vec& b) { for (int i = 0; i < N; ++i) a[i] *= b[i]; return a; } \
  friend msl_vec operator/(msl_vec a, const msl_vec& b) { for (int i = 0; i < N; ++i) a[i] /= b[i]; return a; } \
  friend msl_vec operator*(msl_vec a, T s) { for (int i = 0; i < N; ++i) a[i] *= s; return a; }               \
  friend msl_vec operator*(T s, msl_vec a) { for (int i = 0; i < N; ++i) a[i] *= s; return a; }               \
  msl_vec& operator+=(const msl_vec& b) { return *this = *this + b; }                          \
  msl_vec& operator-=(const msl_vec& b) { return *this = *this - b; }                          \
  msl_vec& operator*=(const msl_vec& b) { return *this = *this * b; }                          \
  msl_vec(const msl_vec& o) { copy_from(reinterpret_cast<uintptr_t>(&o), &o.x); }               \
  msl_vec& operator=(const msl_vec& o) { copy_from(reinterpret_cast<uintptr_t>(&o), &o.x); return *this; } \
  void copy_from(uintptr_t address, const T* src) {                                              \
    if (address % alignof(msl_vec) != 0) msl_emu::misaligned_vector(address, alignof(msl_vec));  \
    std::memcpy(static_cast<void*>(this), src, N * sizeof(T)); /* the components lie in order */ \
  }                                                                                              \
  MSL_VEC_AS_COPY(N)

#if defined(MOELENS_MSL_STRICT)
// Loading a vector from device, constant or threadgroup memory copies across address spaces.
#define MSL_VEC_AS_COPY(N)                                                                                     \
  msl_vec(const MSL_AS_DEVICE msl_vec& o) { copy_from((uintptr_t)&o, (const T*)&o.x); }                       \
  msl_vec(const MSL_AS_CONSTANT msl_vec& o) { copy_from((uintptr_t)&o, (const T*)&o.x); }                     \
  msl_vec(const MSL_AS_THREADGROUP msl_vec& o) { copy_from((uintptr_t)&o, (const T*)&o.x); }
#else
#define MSL_VEC_AS_COPY(N)
#endif

template <class T>
struct alignas(2 * sizeof(T)) msl_vec<T, 2> {
  T x, y;
  msl_vec(T s) : x(s), y(s) {}
  msl_vec(T a, T b) : x(a), y(b) {}
  MSL_VEC_COMMON(2)
};
template <class T>
struct alignas(4 * sizeof(T)) msl_vec<T, 3> {
  T x, y, z;
  msl_vec(T s) : x(s), y(s), z(s) {}
  msl_vec(T a, T b, T c) : x(a), y(b), z(c) {}
  msl_vec<T, 2> xy() const { return {x, y}; }
  MSL_VEC_COMMON(3)
};
template <class T>
struct alignas(4 * sizeof(T)) msl_vec<T, 4> {
  T x, y, z, w;
  msl_vec(T s) : x(s), y(s), z(s), w(s) {}
  msl_vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
  msl_vec<T, 2> xy() const { return {x, y}; }
  msl_vec<T, 3> xyz() const { return {x, y, z}; }
  MSL_VEC_COMMON(4)
};

using float2 = msl_vec<float, 2>;
using float3 = msl_vec<float, 3>;
using float4 = msl_vec<float, 4>;
using int2 = msl_vec<int, 2>;
using int3 = msl_vec<int, 3>;
using int4 = msl_vec<int, 4>;
using uint2 = msl_vec<uint, 2>;
using uint3 = msl_vec<uint, 3>;
using uint4 = msl_vec<uint, 4>;
using ulong2 = msl_vec<ulong, 2>;
using ushort2 = msl_vec<ushort, 2>;
using ushort3 = msl_vec<ushort, 3>;
using ushort4 = msl_vec<ushort, 4>;
using uchar4 = msl_vec<uchar, 4>;
static_assert(sizeof(float3) == 16 && sizeof(uint4) == 16 && alignof(uint4) == 16, "MSL vector layout");

// ---- the emulator's scheduler interface (emulator.cpp) ----
namespace msl_emu {

enum class SimdOp : int { Sum, Product, Min, Max, And, Or, Xor, Shuffle, ShuffleDown, ShuffleUp, ShuffleXor, Broadcast,
                          PrefixExclusiveSum, PrefixInclusiveSum, All, Any, Barrier, Uniform };
enum class ValueType : int { F32, I32, U32 };

// Suspends the calling GPU thread until its simdgroup's 32 lanes reach this collective; returns this
// lane's result. `value` holds the 32-bit pattern of the argument.
uint32_t simd_collective(SimdOp op, ValueType type, uint32_t value, uint32_t arg, int line, const char* file);
// Suspends the calling GPU thread until every thread of its threadgroup reaches this barrier.
void threadgroup_barrier_at(int line, const char* file);
// await_inputs(): where the pre-wait check (emulator.h, set_pre_wait_check) gives the buffers of the
// launches in flight their contents back; nothing when it is off.
void await_inputs_at(int line, const char* file);
// The threadgroup's allocation for the threadgroup variable `site` of the running kernel: NaN-poisoned
// (all bits set) when the threadgroup starts, 32 KiB in all.
void* threadgroup_alloc_bytes(int site, size_t bytes, size_t align);

template <class T>
MSL_AS_THREADGROUP T* threadgroup_alloc(int site) {
  return (MSL_AS_THREADGROUP T*)threadgroup_alloc_bytes(site, sizeof(T), alignof(T));
}

struct ThreadIds {
  uint3 thread_position_in_grid, threadgroup_position_in_grid, thread_position_in_threadgroup, threads_per_threadgroup,
      threadgroups_per_grid, threads_per_grid;
  uint thread_index_in_threadgroup, simdgroup_index_in_threadgroup, thread_index_in_simdgroup,
      simdgroups_per_threadgroup, threads_per_simdgroup;
};

// Runs every thread of the launch; throws msl_emu::Error naming the kernel, threadgroup and thread on
// a barrier or collective not reached uniformly, a deadlock, or threadgroup memory over 32 KiB.
void run(const moelens::gpu::KernelLaunch& launch, const char* kernel, const std::function<void(const ThreadIds&)>& thread);

template <class T>
T device_ptr(void* p) {
  return (T)p;
}
template <class T>
const MSL_AS_CONSTANT T& params_ref(const void* p) {
  return *(const MSL_AS_CONSTANT T*)p;
}

template <class T>
T builtin(const uint3& v);
template <class T>
T builtin(uint v);
template <> inline uint builtin<uint>(uint v) { return v; }
template <> inline ushort builtin<ushort>(uint v) { return ushort(v); }
template <> inline uint builtin<uint>(const uint3& v) { return v.x; }
template <> inline ushort builtin<ushort>(const uint3& v) { return ushort(v.x); }
template <> inline uint2 builtin<uint2>(const uint3& v) { return uint2(v.x, v.y); }
template <> inline uint3 builtin<uint3>(const uint3& v) { return v; }
template <> inline ushort2 builtin<ushort2>(const uint3& v) { return ushort2(ushort(v.x), ushort(v.y)); }
template <> inline ushort3 builtin<ushort3>(const uint3& v) { return ushort3(ushort(v.x), ushort(v.y), ushort(v.z)); }

template <class T>
constexpr ValueType value_type() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, int>::value || std::is_same<T, uint>::value,
                "simd collectives take float, int or uint");
  return std::is_same<T, float>::value ? ValueType::F32 : std::is_same<T, int>::value ? ValueType::I32 : ValueType::U32;
}
template <class T>
uint32_t to_bits(T v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
template <class T>
T from_bits(uint32_t b) {
  T v;
  std::memcpy(&v, &b, 4);
  return v;
}
template <class T>
T collective(SimdOp op, T v, uint32_t arg, int line, const char* file) {
  return from_bits<T>(simd_collective(op, value_type<T>(), to_bits(v), arg, line, file));
}

}  // namespace msl_emu
#endif  // the emulator's types and scheduler

namespace metal {

enum class mem_flags : int { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
MSL_HOST_FN mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }

// The column of a 64-column step of 4-bit weights that position j (0-63) of simdgroup_q4_dequantize's
// fragments holds (not Metal's; shaders/tiles.h): position 8m + i of fragment m is column 16 (i / 2) +
// m % 4 + 8 (m / 4) + 4 (i % 2), so that with CUDA each lane's weights of a step are 8 consecutive
// bytes of its row and each pair of a fragment's elements is one masked word of them. Activations
// multiplied with them are stored in the same order.
MSL_FN uint q4_fragment_column(uint j) { return 16u * (j % 8u / 2u) + j / 8u % 4u + 8u * (j / 32u) + 4u * (j % 2u); }

// ---- launch order and prefetch (not Metal's: shaders/common.h) ----
// await_inputs(): a kernel that calls it (once, as a statement of its body) waits there for the
// previous launch instead of before its first statement (msl-translate). prefetch_l2(p, bytes): a hint
// that [p, p + bytes) is read soon. With CUDA from sm_90 one bulk prefetch into L2 of the 16-byte
// granules that hold the range (L2 is where every SM's reads and writes meet, so a prefetch never
// makes a later read stale). The emulator runs launches one after another and reads the range's first
// and last byte, so that a range past the end of its buffer faults (emu_map_buffer's guard page); its
// pre-wait check (emulator.h) holds the buffers that launches in flight write poisoned up to
// await_inputs(), so that a kernel reading one of them early computes a wrong result.
#if defined(MSL_TARGET_CUDA)
#define await_inputs() msl_cuda::await_previous_kernel(msl_early_dependents)
MSL_FN void prefetch_l2(const void* p, ulong bytes) {
#if __CUDA_ARCH__ >= 900
  if (bytes == 0) return;
  const size_t a = __cvta_generic_to_global(p), lo = a & ~size_t(15), hi = (a + bytes + 15u) & ~size_t(15);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"(uint(hi - lo)) : "memory");
#endif
}
#else
#define await_inputs() msl_emu::await_inputs_at(__LINE__, __FILE__)
MSL_FN void prefetch_l2(const MSL_AS_DEVICE void* p, ulong bytes) {
  if (bytes == 0) return;
  const volatile MSL_AS_DEVICE unsigned char* b = (const volatile MSL_AS_DEVICE unsigned char*)p;
  (void)b[0];
  (void)b[bytes - 1];
}
#endif

#if defined(MSL_TARGET_CUDA)
MSL_FN void threadgroup_barrier(mem_flags) { __syncthreads(); }
MSL_FN void simdgroup_barrier(mem_flags) { __syncwarp(); }

template <class T, class U>
MSL_FN T as_type(U v) {
  static_assert(sizeof(T) == sizeof(U), "as_type needs equal sizes");
  T t;
  memcpy(&t, &v, sizeof(T));
  return t;
}
template <>
MSL_FN half as_type<half, ushort>(ushort v) {
  return __ushort_as_half(v);
}

constexpr unsigned kFullMask = 0xffffffffu;

template <class T>
MSL_FN T simd_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
template <class T>
MSL_FN T simd_product(T v) {
  for (int o = 16; o > 0; o >>= 1) v *= __shfl_xor_sync(kFullMask, v, o);
  return v;
}
template <class T>
MSL_FN T simd_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <class T>
MSL_FN T simd_min(T v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
#if __CUDA_ARCH__ >= 800
// 32-bit integers reduce in one instruction (redux) from sm_80: the same result as the shuffles.
#define MSL_REDUX(fn, redux, T) \
  template <>               \
  MSL_FN T fn<T>(T v) {     \
    return redux(kFullMask, v); \
  }
MSL_REDUX(simd_max, __reduce_max_sync, uint)
MSL_REDUX(simd_min, __reduce_min_sync, uint)
MSL_REDUX(simd_max, __reduce_max_sync, int)
MSL_REDUX(simd_min, __reduce_min_sync, int)
#undef MSL_REDUX
#endif
template <class T>
MSL_FN T simd_prefix_inclusive_sum(T v) {
  const int lane = threadIdx.x & 31;
  for (int o = 1; o < 32; o <<= 1) {
    const T u = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += u;
  }
  return v;
}
template <class T>
MSL_FN T simd_prefix_exclusive_sum(T v) {
  return simd_prefix_inclusive_sum(v) - v;
}
template <class T>
MSL_FN T simd_shuffle(T v, ushort lane) {
  return __shfl_sync(kFullMask, v, lane);
}
template <class T>
MSL_FN T simd_shuffle_down(T v, ushort delta) {
  return __shfl_down_sync(kFullMask, v, delta);
}
template <class T>
MSL_FN T simd_shuffle_up(T v, ushort delta) {
  return __shfl_up_sync(kFullMask, v, delta);
}
template <class T>
MSL_FN T simd_shuffle_xor(T v, ushort mask) {
  return __shfl_xor_sync(kFullMask, v, mask);
}
template <class T>
MSL_FN T simd_broadcast(T v, ushort lane) {
  return __shfl_sync(kFullMask, v, lane);
}
template <class T>
MSL_FN T simd_broadcast_first(T v) {
  return __shfl_sync(kFullMask, v, 0);
}
MSL_FN bool simd_all(bool v) { return __all_sync(kFullMask, v); }
MSL_FN bool simd_any(bool v) { return __any_sync(kFullMask, v); }

MSL_FN float clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
MSL_FN int clamp(int x, int lo, int hi) { return min(max(x, lo), hi); }
MSL_FN uint clamp(uint x, uint lo, uint hi) { return min(max(x, lo), hi); }

// ---- simdgroup matrices ----
// Each lane holds two elements of an 8x8 matrix in the register layout of mma.sync m16n8k8 (the rows
// 0-7 of its 16-row operands): a float matrix as the accumulator, row lane/4 and columns 2(lane%4) and
// 2(lane%4)+1; a half matrix twice, as the A operand (the same elements) and as the B operand (rows
// 2(lane%4) and 2(lane%4)+1 of column lane/4), so that either role costs no shuffles (the role a
// kernel never uses is never loaded: the compiler drops it). One of the two reads a pair of adjacent
// stored halfs, one 32-bit load where the rows are 4-byte aligned. One simdgroup_multiply_accumulate
// is one tensor-core instruction whose rows 8-15 are zero; simdgroup_multiply_accumulate_pair fills
// them with a second product of the same B.
template <class T, int Rows, int Cols>
struct simdgroup_matrix;
template <>
struct simdgroup_matrix<half, 8, 8> {
  uint32_t a, b;  // two halves each: as the A operand, as the B operand
};
template <>
struct simdgroup_matrix<float, 8, 8> {
  float c0, c1;
};
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;

namespace simdgroup_detail {
MSL_FN uint32_t pack(half lo, half hi) {
  return uint32_t(__half_as_ushort(lo)) | (uint32_t(__half_as_ushort(hi)) << 16);
}
// The lane of the calling thread in its warp (threads are numbered x first, as simdgroups are).
MSL_FN uint lane() { return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u; }
MSL_FN size_t element_index(uint r, uint c, ulong elements_per_row, ulong2 origin, bool transpose) {
  return transpose ? size_t((origin.y + c) * elements_per_row + origin.x + r)
                   : size_t((origin.y + r) * elements_per_row + origin.x + c);
}
// (a & mask) | bits in one lop3: written as C, nvcc emits two (its immediate operands do not fit one).
MSL_FN uint32_t and_or(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
  return d;
}
}  // namespace simdgroup_detail

template <class T, int Rows, int Cols>
MSL_FN simdgroup_matrix<T, Rows, Cols> make_filled_simdgroup_matrix(T value);
template <>
MSL_FN simdgroup_float8x8 make_filled_simdgroup_matrix<float, 8, 8>(float value) {
  return {value, value};
}
template <>
MSL_FN simdgroup_half8x8 make_filled_simdgroup_matrix<half, 8, 8>(half value) {
  const uint32_t w = simdgroup_detail::pack(value, value);
  return {w, w};
}

MSL_FN void simdgroup_load(simdgroup_half8x8& m, const half* src, ulong elements_per_row,
                           ulong2 origin = make_ulong2(0, 0), bool transpose = false) {
  const uint lane = simdgroup_detail::lane(), g = lane >> 2, t2 = (lane & 3u) * 2u;
  const half* base = src + origin.y * elements_per_row + origin.x;
  // Stored row g, columns t2 and t2+1: adjacent, one 32-bit load when every row is 4-byte aligned (the
  // same for all lanes: the branch is uniform).
  const half* pair = base + g * elements_per_row + t2;
  const bool words = ((reinterpret_cast<uintptr_t>(base) | uintptr_t(elements_per_row * sizeof(half))) & 3u) == 0;
  const uint32_t along =
      words ? *reinterpret_cast<const uint32_t*>(pair) : simdgroup_detail::pack(pair[0], pair[1]);
  // Stored rows t2 and t2+1, column g.
  const uint32_t across = simdgroup_detail::pack(base[t2 * elements_per_row + g], base[(t2 + 1u) * elements_per_row + g]);
  m.a = transpose ? across : along;
  m.b = transpose ? along : across;
}
MSL_FN void simdgroup_load(simdgroup_float8x8& m, const float* src, ulong elements_per_row,
                           ulong2 origin = make_ulong2(0, 0), bool transpose = false) {
  const uint lane = simdgroup_detail::lane(), g = lane >> 2, t2 = (lane & 3u) * 2u;
  m.c0 = src[simdgroup_detail::element_index(g, t2, elements_per_row, origin, transpose)];
  m.c1 = src[simdgroup_detail::element_index(g, t2 + 1u, elements_per_row, origin, transpose)];
}
MSL_FN void simdgroup_store(simdgroup_float8x8 m, float* dst, ulong elements_per_row,
                            ulong2 origin = make_ulong2(0, 0), bool transpose = false) {
  const uint lane = simdgroup_detail::lane(), g = lane >> 2, t2 = (lane & 3u) * 2u;
  dst[simdgroup_detail::element_index(g, t2, elements_per_row, origin, transpose)] = m.c0;
  dst[simdgroup_detail::element_index(g, t2 + 1u, elements_per_row, origin, transpose)] = m.c1;
}
MSL_FN void simdgroup_store(simdgroup_half8x8 m, half* dst, ulong elements_per_row,
                            ulong2 origin = make_ulong2(0, 0), bool transpose = false) {
  const uint lane = simdgroup_detail::lane(), g = lane >> 2, t2 = (lane & 3u) * 2u;
  dst[simdgroup_detail::element_index(g, t2, elements_per_row, origin, transpose)] = __ushort_as_half(ushort(m.a & 0xffffu));
  dst[simdgroup_detail::element_index(g, t2 + 1u, elements_per_row, origin, transpose)] = __ushort_as_half(ushort(m.a >> 16));
}

// d = a * b + c on the tensor cores (fp16 operands, fp32 accumulation).
MSL_FN void simdgroup_multiply_accumulate(simdgroup_float8x8& d, simdgroup_half8x8 a, simdgroup_half8x8 b,
                                          simdgroup_float8x8 c) {
  [[maybe_unused]] float unused0, unused1;  // rows 8-15
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
      : "=f"(d.c0), "=f"(d.c1), "=f"(unused0), "=f"(unused1)
      : "r"(a.a), "r"(0u), "r"(b.b), "f"(c.c0), "f"(c.c1), "f"(0.0f), "f"(0.0f));
}
MSL_FN void simdgroup_multiply(simdgroup_float8x8& d, simdgroup_half8x8 a, simdgroup_half8x8 b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<float, 8, 8>(0.0f));
}
// d0 = a0 * b + c0 and d1 = a1 * b + c1 in one tensor-core instruction: a0 and a1 are its rows 0-7
// and 8-15.
MSL_FN void simdgroup_multiply_accumulate_pair(simdgroup_float8x8& d0, simdgroup_float8x8& d1, simdgroup_half8x8 a0,
                                               simdgroup_half8x8 a1, simdgroup_half8x8 b, simdgroup_float8x8 c0,
                                               simdgroup_float8x8 c1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
      : "=f"(d0.c0), "=f"(d0.c1), "=f"(d1.c0), "=f"(d1.c1)
      : "r"(a0.a), "r"(a1.a), "r"(b.b), "f"(c0.c0), "f"(c0.c1), "f"(c1.c0), "f"(c1.c1));
}

// ---- simdgroup matrices: the tiled prefill GEMMs' calls (not Metal's; composed of Metal's calls on
// Metal, shaders/tiles.h) ----
// simdgroup_load4: a 16x16 matrix of threadgroup memory whose rows are 16-byte aligned, as its four 8x8
// quadrants m0 (rows 0-7, columns 0-7), m1 (rows 8-15), m2 (columns 8-15), m3 (both), which is the
// order of the A fragments of m16n8k16 and, transposed, of two of its B fragments. One ldmatrix.x4 for
// the role a quadrant reads along stored rows (lane l addresses row l % 8 of quadrant l / 8); the
// other role by per-element loads, which the compiler drops when unused.
MSL_FN void simdgroup_load4(simdgroup_half8x8& m0, simdgroup_half8x8& m1, simdgroup_half8x8& m2, simdgroup_half8x8& m3,
                            const half* src, ulong elements_per_row, ulong2 origin = make_ulong2(0, 0),
                            bool transpose = false) {
  const uint lane = simdgroup_detail::lane(), g = lane >> 2, t2 = (lane & 3u) * 2u, q = lane >> 3;
  // Quadrant i: rows 8(i % 2), columns 8(i / 2) of the 16x16 matrix; stored the other way round when transposed.
  const ulong down = 8u * (transpose ? q / 2u : q % 2u), across_columns = 8u * (transpose ? q % 2u : q / 2u);
  const half* row = src + (origin.y + down + (lane & 7u)) * elements_per_row + origin.x + across_columns;
  uint32_t along[4];
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(along[0]), "=r"(along[1]), "=r"(along[2]), "=r"(along[3])
               : "r"(uint32_t(__cvta_generic_to_shared(row)))
               : "memory");
  simdgroup_half8x8* m[4] = {&m0, &m1, &m2, &m3};
#pragma unroll
  for (uint i = 0; i < 4u; ++i) {
    const ulong di = 8u * (transpose ? i / 2u : i % 2u), ci = 8u * (transpose ? i % 2u : i / 2u);
    const half* base = src + (origin.y + di) * elements_per_row + origin.x + ci;
    const uint32_t across = simdgroup_detail::pack(base[t2 * elements_per_row + g], base[(t2 + 1u) * elements_per_row + g]);
    m[i]->a = transpose ? across : along[i];
    m[i]->b = transpose ? along[i] : across;
  }
}
// simdgroup_multiply_accumulate_16x16: d0 = a00 * b0 + a01 * b1 + c0 and d1 = a10 * b0 + a11 * b1 + c1
// (a 16x16 by 16x8 product: a_rk the row block r, k block k) in one tensor-core instruction.
MSL_FN void simdgroup_multiply_accumulate_16x16(simdgroup_float8x8& d0, simdgroup_float8x8& d1, simdgroup_half8x8 a00,
                                                simdgroup_half8x8 a10, simdgroup_half8x8 a01, simdgroup_half8x8 a11,
                                                simdgroup_half8x8 b0, simdgroup_half8x8 b1, simdgroup_float8x8 c0,
                                                simdgroup_float8x8 c1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d0.c0), "=f"(d0.c1), "=f"(d1.c0), "=f"(d1.c1)
      : "r"(a00.a), "r"(a10.a), "r"(a01.a), "r"(a11.a), "r"(b0.b), "r"(b1.b), "f"(c0.c0), "f"(c0.c1), "f"(c1.c0),
        "f"(c1.c1));
}

// simdgroup_q4_load / simdgroup_q4_dequantize (shaders/tiles.h states them): lane l holds row l / 4's
// bytes 8 (l % 4) .. +7 of the step, its columns 16 (l % 4) .. +15, which are the B-operand elements
// of every fragment of that row (q4_fragment_column). A pair of them is one masked word under the
// exponent of half's 1024 (low nibbles: 1024 + v exactly) or of 64 (high nibbles: 64 + v), so two
// weights cost one lop3, a subtraction and a fused multiply-add, plus a byte permutation per four,
// and neither shuffles nor threadgroup memory.
struct simdgroup_q4_block {
  uint2 v;
};
struct simdgroup_q4_scales {
  uint2 v;  // row l / 4's scale and bias, each a half in both halves of its word
};
MSL_FN void simdgroup_q4_load(simdgroup_q4_block& q, const uchar* rows, ulong row_bytes, uint k0, ushort lane) {
  q.v = *reinterpret_cast<const uint2*>(rows + (lane >> 2) * row_bytes + k0 / 2u + 8u * (lane & 3u));
}
MSL_FN void simdgroup_q4_scales_load(simdgroup_q4_scales& s, const uint* scale_bias, ushort lane) {
  s.v = reinterpret_cast<const uint2*>(scale_bias)[lane >> 2];
}
MSL_FN void simdgroup_q4_dequantize(simdgroup_half8x8& w0, simdgroup_half8x8& w1, const simdgroup_q4_block& q, uint block,
                                    const simdgroup_q4_scales& sb, ushort lane) {
  // fragments 2 block and 2 block + 1: nibbles 2 (block % 2) and the next of each 16-bit half of a word,
  // its bytes block % 2 and 2 + block % 2 moved to bytes 0 and 2 by one byte permutation
  const uint byte = 4u * (block >> 1) + (block & 1u);
  const uint word = __byte_perm(q.v.x, q.v.y, byte | ((byte + 2u) << 8));
  const uint pair0 = simdgroup_detail::and_or(word, 0x000F000Fu, 0x64006400u);
  const uint pair1 = simdgroup_detail::and_or(word, 0x00F000F0u, 0x54005400u);
  const __half2 k1024 = __halves2half2(__ushort_as_half(0x6400u), __ushort_as_half(0x6400u));
  const __half2 k64 = __halves2half2(__ushort_as_half(0x5400u), __ushort_as_half(0x5400u));
  const __half2 s = reinterpret_cast<const __half2&>(sb.v.x), b = reinterpret_cast<const __half2&>(sb.v.y);
  const __half2 r0 = __hfma2(__hsub2(reinterpret_cast<const __half2&>(pair0), k1024), s, b);
  const __half2 r1 = __hfma2(__hsub2(reinterpret_cast<const __half2&>(pair1), k64), s, b);
  w0.a = w1.a = 0u;  // the A role is never used
  w0.b = reinterpret_cast<const uint32_t&>(r0);
  w1.b = reinterpret_cast<const uint32_t&>(r1);
}

// precise:: is CUDA's default math (not the intrinsics); fast:: the intrinsics.
namespace precise {
MSL_FN float divide(float x, float y) { return x / y; }  // IEEE division: the CUDA build keeps nvcc's default
MSL_FN float exp(float x) { return ::expf(x); }
MSL_FN float log(float x) { return ::logf(x); }
MSL_FN float sqrt(float x) { return ::sqrtf(x); }
MSL_FN float rsqrt(float x) { return ::rsqrtf(x); }
MSL_FN float sin(float x) { return ::sinf(x); }
MSL_FN float cos(float x) { return ::cosf(x); }
MSL_FN float tanh(float x) { return ::tanhf(x); }
MSL_FN float pow(float x, float y) { return ::powf(x, y); }
}  // namespace precise
namespace fast {
MSL_FN float exp(float x) { return __expf(x); }
MSL_FN float log(float x) { return __logf(x); }
MSL_FN float sqrt(float x) { return ::sqrtf(x); }
MSL_FN float rsqrt(float x) { return ::rsqrtf(x); }
MSL_FN float sin(float x) { return __sinf(x); }
MSL_FN float cos(float x) { return __cosf(x); }
MSL_FN float tanh(float x) { return ::tanhf(x); }
MSL_FN float pow(float x, float y) { return __powf(x, y); }
}  // namespace fast
#else
inline void threadgroup_barrier(mem_flags, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  msl_emu::threadgroup_barrier_at(line, file);
}
inline void simdgroup_barrier(mem_flags, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  msl_emu::collective<uint>(msl_emu::SimdOp::Barrier, 0u, 0u, line, file);
}

#define MSL_SIMD_REDUCE(fn, op)                                                                         \
  inline float fn(float v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {       \
    return msl_emu::collective<float>(msl_emu::SimdOp::op, v, 0u, line, file);                        \
  }                                                                                                   \
  inline int fn(int v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {           \
    return msl_emu::collective<int>(msl_emu::SimdOp::op, v, 0u, line, file);                          \
  }                                                                                                   \
  inline uint fn(uint v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {         \
    return msl_emu::collective<uint>(msl_emu::SimdOp::op, v, 0u, line, file);                         \
  }
MSL_SIMD_REDUCE(simd_sum, Sum)
MSL_SIMD_REDUCE(simd_product, Product)
MSL_SIMD_REDUCE(simd_min, Min)
MSL_SIMD_REDUCE(simd_max, Max)
MSL_SIMD_REDUCE(simd_prefix_exclusive_sum, PrefixExclusiveSum)
MSL_SIMD_REDUCE(simd_prefix_inclusive_sum, PrefixInclusiveSum)
MSL_SIMD_REDUCE(simd_broadcast_first, Broadcast)
#undef MSL_SIMD_REDUCE
inline int simd_and(int v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  return msl_emu::collective<int>(msl_emu::SimdOp::And, v, 0u, line, file);
}
inline uint simd_and(uint v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  return msl_emu::collective<uint>(msl_emu::SimdOp::And, v, 0u, line, file);
}
inline int simd_or(int v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  return msl_emu::collective<int>(msl_emu::SimdOp::Or, v, 0u, line, file);
}
inline uint simd_or(uint v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  return msl_emu::collective<uint>(msl_emu::SimdOp::Or, v, 0u, line, file);
}
inline int simd_xor(int v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  return msl_emu::collective<int>(msl_emu::SimdOp::Xor, v, 0u, line, file);
}
inline uint simd_xor(uint v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  return msl_emu::collective<uint>(msl_emu::SimdOp::Xor, v, 0u, line, file);
}

#define MSL_SIMD_MOVE(fn, op)                                                                                    \
  inline float fn(float v, ushort arg, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {     \
    return msl_emu::collective<float>(msl_emu::SimdOp::op, v, arg, line, file);                                 \
  }                                                                                                             \
  inline int fn(int v, ushort arg, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {         \
    return msl_emu::collective<int>(msl_emu::SimdOp::op, v, arg, line, file);                                   \
  }                                                                                                             \
  inline uint fn(uint v, ushort arg, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {       \
    return msl_emu::collective<uint>(msl_emu::SimdOp::op, v, arg, line, file);                                  \
  }
MSL_SIMD_MOVE(simd_shuffle, Shuffle)
MSL_SIMD_MOVE(simd_shuffle_down, ShuffleDown)
MSL_SIMD_MOVE(simd_shuffle_up, ShuffleUp)
MSL_SIMD_MOVE(simd_shuffle_xor, ShuffleXor)
MSL_SIMD_MOVE(simd_broadcast, Broadcast)
#undef MSL_SIMD_MOVE
inline bool simd_all(bool v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  return msl_emu::collective<uint>(msl_emu::SimdOp::All, v ? 1u : 0u, 0u, line, file) != 0u;
}
inline bool simd_any(bool v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  return msl_emu::collective<uint>(msl_emu::SimdOp::Any, v ? 1u : 0u, 0u, line, file) != 0u;
}

template <class T, class U>
T as_type(U v) {
  static_assert(sizeof(T) == sizeof(U), "as_type needs equal sizes");
  T t;
  std::memcpy(static_cast<void*>(&t), &v, sizeof(T));
  return t;
}

// Math on scalars (non-template overloads, so that threadgroup/device lvalues convert as in MSL).
#define MSL_MATH1(fn, impl) \
  inline float fn(float x) { return impl(x); }
#define MSL_MATH_ALL                        \
  MSL_MATH1(exp, std::exp)                  \
  MSL_MATH1(exp2, std::exp2)                \
  MSL_MATH1(log, std::log)                  \
  MSL_MATH1(log2, std::log2)                \
  MSL_MATH1(sqrt, std::sqrt)                \
  MSL_MATH1(sin, std::sin)                  \
  MSL_MATH1(cos, std::cos)                  \
  MSL_MATH1(tan, std::tan)                  \
  MSL_MATH1(tanh, std::tanh)                \
  MSL_MATH1(floor, std::floor)              \
  MSL_MATH1(ceil, std::ceil)                \
  MSL_MATH1(round, std::round)              \
  MSL_MATH1(trunc, std::trunc)              \
  MSL_MATH1(rint, std::rint)                \
  MSL_MATH1(fabs, std::fabs)                \
  inline float rsqrt(float x) { return 1.0f / std::sqrt(x); } \
  inline float pow(float x, float y) { return std::pow(x, y); } \
  inline float powr(float x, float y) { return std::pow(x, y); } \
  inline float fmin(float a, float b) { return std::fmin(a, b); } \
  inline float fmax(float a, float b) { return std::fmax(a, b); } \
  inline float fma(float a, float b, float c) { return std::fma(a, b, c); } \
  inline float divide(float x, float y) { return x / y; }
MSL_MATH_ALL
namespace precise {
MSL_MATH_ALL
}
namespace fast {
MSL_MATH_ALL
}
#undef MSL_MATH_ALL
#undef MSL_MATH1

inline float abs(float x) { return std::fabs(x); }
inline int abs(int x) { return x < 0 ? -x : x; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline uint min(uint a, uint b) { return a < b ? a : b; }
inline uint max(uint a, uint b) { return a > b ? a : b; }
inline float clamp(float x, float lo, float hi) { return min(max(x, lo), hi); }
inline int clamp(int x, int lo, int hi) { return min(max(x, lo), hi); }
inline uint clamp(uint x, uint lo, uint hi) { return min(max(x, lo), hi); }
inline float sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f; }
inline bool isnan(float x) { return std::isnan(x); }
inline bool isinf(float x) { return std::isinf(x); }
inline bool isfinite(float x) { return std::isfinite(x); }
inline bool signbit(float x) { return std::signbit(x); }

// ---- simdgroup matrices ----
// The emulator gives every lane the whole 8x8 matrix: the subset has no thread_elements(), so how a
// GPU spreads a matrix over its lanes cannot be observed. Every operation is a collective: all 32
// lanes call it at the same site, loads and stores with the same arguments (checked), so the lanes'
// copies stay equal. A store writes two elements per lane, as a GPU does, so reading a stored matrix
// with per-thread code before a barrier shows.
template <class T, int Rows, int Cols>
struct simdgroup_matrix {
  static_assert(Rows == 8 && Cols == 8, "the portable subset has 8x8 simdgroup matrices");
  T e[64];  // row-major
};
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;

template <class T, int Rows, int Cols>
inline simdgroup_matrix<T, Rows, Cols> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Rows, Cols> m;
  for (T& x : m.e) x = value;
  return m;
}

namespace simdgroup_detail {
// One value of the arguments every lane must agree on.
inline uint argument_digest(const void* p, ulong elements_per_row, ulong2 origin, bool transpose) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : {uint64_t(reinterpret_cast<uintptr_t>(p)), uint64_t(elements_per_row), uint64_t(origin.x),
                     uint64_t(origin.y), uint64_t(transpose)})
    h = (h ^ v) * 1099511628211ull;
  return uint(h ^ (h >> 32));
}
inline size_t element_index(int r, int c, ulong elements_per_row, ulong2 origin, bool transpose) {
  return transpose ? size_t((origin.y + ulong(c)) * elements_per_row + origin.x + ulong(r))
                   : size_t((origin.y + ulong(r)) * elements_per_row + origin.x + ulong(c));
}
}  // namespace simdgroup_detail

#define MSL_SIMDGROUP_LOAD_STORE(T, AS)                                                                           \
  inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& m, const AS T* src, ulong elements_per_row,             \
                             ulong2 origin = ulong2(0, 0), bool transpose = false, int line = __builtin_LINE(), \
                             const char* file = __builtin_FILE()) {                                             \
    msl_emu::collective<uint>(msl_emu::SimdOp::Uniform,                                                           \
                              simdgroup_detail::argument_digest((const void*)src, elements_per_row, origin, transpose), \
                              0u, line, file);                                                                  \
    for (int r = 0; r < 8; ++r)                                                                                   \
      for (int c = 0; c < 8; ++c)                                                                                 \
        m.e[r * 8 + c] = src[simdgroup_detail::element_index(r, c, elements_per_row, origin, transpose)];        \
  }                                                                                                               \
  inline void simdgroup_store(simdgroup_matrix<T, 8, 8> m, AS T* dst, ulong elements_per_row,                   \
                              ulong2 origin = ulong2(0, 0), bool transpose = false, int line = __builtin_LINE(), \
                              const char* file = __builtin_FILE()) {                                            \
    const uint lane = msl_emu::collective<uint>(msl_emu::SimdOp::Uniform,                                         \
        simdgroup_detail::argument_digest((const void*)dst, elements_per_row, origin, transpose), 0u, line, file); \
    for (int i = 2 * int(lane); i < 2 * int(lane) + 2; ++i)                                                       \
      dst[simdgroup_detail::element_index(i / 8, i % 8, elements_per_row, origin, transpose)] = m.e[i];          \
  }
MSL_SIMDGROUP_LOAD_STORE(half, MSL_AS_THREADGROUP)
MSL_SIMDGROUP_LOAD_STORE(float, MSL_AS_THREADGROUP)
#if defined(MOELENS_MSL_STRICT)
MSL_SIMDGROUP_LOAD_STORE(half, MSL_AS_DEVICE)
MSL_SIMDGROUP_LOAD_STORE(float, MSL_AS_DEVICE)
#endif
#undef MSL_SIMDGROUP_LOAD_STORE

namespace simdgroup_detail {
// The 32 lanes of a simdgroup compute the same product of the same matrices one after another (each
// holds the whole matrices). The last few products computed on this OS thread are kept with their
// whole inputs: a lane whose inputs are bit for bit a kept product's takes its result, which is what it
// would compute; a lane whose inputs differ computes its own.
struct KeptProduct {
  simdgroup_half8x8 a, b;
  simdgroup_float8x8 c, d;
  bool valid = false;
};
constexpr int kKeptProducts = 4;
inline KeptProduct* kept_products() {
  thread_local KeptProduct kept[kKeptProducts];
  return kept;
}
inline int& next_kept_product() {
  thread_local int next = 0;
  return next;
}
}  // namespace simdgroup_detail

// d = a * b + c: products of fp16 values are exact in fp32, summed in fp32 over k in order.
inline void simdgroup_multiply_accumulate(simdgroup_float8x8& d, const simdgroup_half8x8& a, const simdgroup_half8x8& b,
                                          const simdgroup_float8x8& c, int line = __builtin_LINE(),
                                          const char* file = __builtin_FILE()) {
  msl_emu::collective<uint>(msl_emu::SimdOp::Uniform, 0u, 0u, line, file);
  simdgroup_detail::KeptProduct* kept = simdgroup_detail::kept_products();
  for (int i = 0; i < simdgroup_detail::kKeptProducts; ++i)
    if (kept[i].valid && std::memcmp(kept[i].a.e, a.e, sizeof a.e) == 0 && std::memcmp(kept[i].b.e, b.e, sizeof b.e) == 0 &&
        std::memcmp(kept[i].c.e, c.e, sizeof c.e) == 0) {
      d = kept[i].d;
      return;
    }
  float fa[64], fb[64];
  for (int i = 0; i < 64; ++i) fa[i] = float(a.e[i]), fb[i] = float(b.e[i]);
  simdgroup_detail::KeptProduct& k = kept[simdgroup_detail::next_kept_product()];
  simdgroup_detail::next_kept_product() = (simdgroup_detail::next_kept_product() + 1) % simdgroup_detail::kKeptProducts;
  k.a = a, k.b = b, k.c = c;
  for (int r = 0; r < 8; ++r)
    for (int col = 0; col < 8; ++col) {
      float acc = c.e[r * 8 + col];
      for (int kk = 0; kk < 8; ++kk) acc = std::fma(fa[r * 8 + kk], fb[kk * 8 + col], acc);
      k.d.e[r * 8 + col] = acc;
    }
  k.valid = true;
  d = k.d;
}
inline void simdgroup_multiply(simdgroup_float8x8& d, const simdgroup_half8x8& a, const simdgroup_half8x8& b,
                               int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<float, 8, 8>(0.0f), line, file);
}
// Not Metal's: two products sharing b, d0 = a0 * b + c0 and d1 = a1 * b + c1 (one tensor-core
// instruction with CUDA; two simdgroup_multiply_accumulate on Metal, shaders/tiles.h).
inline void simdgroup_multiply_accumulate_pair(simdgroup_float8x8& d0, simdgroup_float8x8& d1, const simdgroup_half8x8& a0,
                                               const simdgroup_half8x8& a1, const simdgroup_half8x8& b,
                                               const simdgroup_float8x8& c0, const simdgroup_float8x8& c1,
                                               int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  const simdgroup_float8x8 c1_copy = c1;  // d0 may be c1
  simdgroup_multiply_accumulate(d0, a0, b, c0, line, file);
  simdgroup_multiply_accumulate(d1, a1, b, c1_copy, line, file);
}

// ---- simdgroup matrices: the tiled prefill GEMMs' calls (not Metal's; composed of Metal's calls on
// Metal, shaders/tiles.h) ----
// A 16x16 matrix as its four 8x8 quadrants m0 (rows 0-7, columns 0-7), m1 (rows 8-15), m2 (columns
// 8-15), m3 (both): four simdgroup_load, element (r, c) of the 16x16 matrix being src[(origin.y + r) *
// elements_per_row + origin.x + c], or with transpose src[(origin.y + c) * elements_per_row + origin.x + r].
// Threadgroup memory only, rows 16-byte aligned (CUDA loads them with one ldmatrix.x4, whose row
// addresses must be).
inline void simdgroup_load4(simdgroup_half8x8& m0, simdgroup_half8x8& m1, simdgroup_half8x8& m2, simdgroup_half8x8& m3,
                            const MSL_AS_THREADGROUP half* src, ulong elements_per_row, ulong2 origin = ulong2(0, 0),
                            bool transpose = false, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  const uintptr_t first = (uintptr_t)(src + origin.y * elements_per_row + origin.x);
  if (first % 16u != 0) msl_emu::misaligned_vector(first, 16);
  if (elements_per_row * sizeof(half) % 16u != 0) msl_emu::misaligned_vector(first + elements_per_row * sizeof(half), 16);
  const ulong down = transpose ? 0u : 8u, right = transpose ? 8u : 0u;  // where m1 lies (m2 the other way)
  simdgroup_load(m0, src, elements_per_row, origin, transpose, line, file);
  simdgroup_load(m1, src, elements_per_row, ulong2(origin.x + right, origin.y + down), transpose, line, file);
  simdgroup_load(m2, src, elements_per_row, ulong2(origin.x + down, origin.y + right), transpose, line, file);
  simdgroup_load(m3, src, elements_per_row, ulong2(origin.x + 8u, origin.y + 8u), transpose, line, file);
}
// d0 = a00 * b0 + a01 * b1 + c0 and d1 = a10 * b0 + a11 * b1 + c1 (a 16x16 by 16x8 product: a_rk the
// row block r, k block k): the k block 0 products, then the k block 1 products.
inline void simdgroup_multiply_accumulate_16x16(simdgroup_float8x8& d0, simdgroup_float8x8& d1, const simdgroup_half8x8& a00,
                                                const simdgroup_half8x8& a10, const simdgroup_half8x8& a01,
                                                const simdgroup_half8x8& a11, const simdgroup_half8x8& b0,
                                                const simdgroup_half8x8& b1, const simdgroup_float8x8& c0,
                                                const simdgroup_float8x8& c1, int line = __builtin_LINE(),
                                                const char* file = __builtin_FILE()) {
  simdgroup_multiply_accumulate_pair(d0, d1, a00, a10, b0, c0, c1, line, file);
  simdgroup_multiply_accumulate_pair(d0, d1, a01, a11, b1, d0, d1, line, file);
}
// simdgroup_q4_load / simdgroup_q4_dequantize (shaders/tiles.h states them): every lane holds the
// whole 8 rows x 32 bytes; `lane` must be the caller's own (the CUDA and Metal builds place elements by it).
struct simdgroup_q4_block {
  uchar bytes[8][32];
};
inline void simdgroup_q4_load(simdgroup_q4_block& q, const MSL_AS_DEVICE uchar* rows, ulong row_bytes, uint k0, ushort lane,
                              int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  const uint own = msl_emu::collective<uint>(msl_emu::SimdOp::Uniform,
                                             simdgroup_detail::argument_digest((const void*)rows, row_bytes, ulong2(k0, 0), false),
                                             0u, line, file);
  if (uint(lane) != own) msl_emu::wrong_lane(lane, own);
  const uintptr_t first = (uintptr_t)(rows + k0 / 2u);  // CUDA reads 8 bytes of each row per lane
  if (first % 8u != 0) msl_emu::misaligned_vector(first, 8);
  if (row_bytes % 8u != 0) msl_emu::misaligned_vector(first + row_bytes, 8);
  for (int r = 0; r < 8; ++r)
    for (int b = 0; b < 32; ++b) q.bytes[r][b] = rows[ulong(r) * row_bytes + k0 / 2u + uint(b)];
}
struct simdgroup_q4_scales {
  float scale[8], bias[8];
};
inline void simdgroup_q4_scales_load(simdgroup_q4_scales& s, const MSL_AS_THREADGROUP uint* scale_bias, ushort lane,
                                     int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
  const uint own = msl_emu::collective<uint>(msl_emu::SimdOp::Uniform,
                                             simdgroup_detail::argument_digest((const void*)scale_bias, 0, ulong2(0, 0), false),
                                             0u, line, file);
  if (uint(lane) != own) msl_emu::wrong_lane(lane, own);
  if ((uintptr_t)scale_bias % 8u != 0) msl_emu::misaligned_vector((uintptr_t)scale_bias, 8);  // CUDA reads a uint2 per row
  for (uint j = 0; j < 8u; ++j) {
    s.scale[j] = float(as_type<half>(ushort(scale_bias[2u * j] & 0xffffu)));
    s.bias[j] = float(as_type<half>(ushort(scale_bias[2u * j + 1u] & 0xffffu)));
  }
}
inline void simdgroup_q4_dequantize(simdgroup_half8x8& w0, simdgroup_half8x8& w1, const simdgroup_q4_block& q, uint block,
                                    const simdgroup_q4_scales& s, ushort lane, int line = __builtin_LINE(),
                                    const char* file = __builtin_FILE()) {
  const uint own = msl_emu::collective<uint>(msl_emu::SimdOp::Uniform,
                                             simdgroup_detail::argument_digest(nullptr, 0, ulong2(block, 0), false),
                                             0u, line, file);
  if (uint(lane) != own) msl_emu::wrong_lane(lane, own);
  simdgroup_half8x8* w[2] = {&w0, &w1};
  for (uint f = 0; f < 2u; ++f)
    for (uint i = 0; i < 8u; ++i)
      for (uint j = 0; j < 8u; ++j) {
        const uint c = q4_fragment_column(16u * block + 8u * f + i);
        const uint nibble = (uint(q.bytes[j][c / 2u]) >> (4u * (c % 2u))) & 15u;
        w[f]->e[i * 8u + j] = half(float(nibble) * s.scale[j] + s.bias[j]);
      }
}
#endif

MSL_FN float select(float a, float b, bool c) { return c ? b : a; }
MSL_FN int select(int a, int b, bool c) { return c ? b : a; }
MSL_FN uint select(uint a, uint b, bool c) { return c ? b : a; }
MSL_FN float mix(float a, float b, float t) { return a + (b - a) * t; }

}  // namespace metal

#if defined(MSL_TARGET_CUDA)
namespace msl_cuda {

MSL_FN uint linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
MSL_FN uint3 thread_position_in_grid() {
  return make_uint3(blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y,
                    blockIdx.z * blockDim.z + threadIdx.z);
}
MSL_FN uint3 threadgroup_position_in_grid() { return blockIdx; }
MSL_FN uint3 thread_position_in_threadgroup() { return threadIdx; }
MSL_FN uint3 threads_per_threadgroup() { return make_uint3(blockDim.x, blockDim.y, blockDim.z); }
MSL_FN uint3 threadgroups_per_grid() { return make_uint3(gridDim.x, gridDim.y, gridDim.z); }
MSL_FN uint3 threads_per_grid() {
  return make_uint3(gridDim.x * blockDim.x, gridDim.y * blockDim.y, gridDim.z * blockDim.z);
}
MSL_FN uint thread_index_in_threadgroup() { return linear_thread(); }
MSL_FN uint simdgroup_index_in_threadgroup() { return linear_thread() / 32u; }
MSL_FN uint thread_index_in_simdgroup() { return linear_thread() % 32u; }
MSL_FN uint simdgroups_per_threadgroup() { return (blockDim.x * blockDim.y * blockDim.z + 31u) / 32u; }
MSL_FN uint threads_per_simdgroup() { return 32u; }

// Every kernel starts here. Launched as a programmatic dependent of the previous kernel (the runtime's
// default, Hopper and later), a kernel's blocks may start before that kernel has finished: they wait
// here until it has, and its writes are visible. With `early` (a decode step's kernels) they then let
// the next kernel launch, so that its launch latency overlaps this kernel's work (at most two kernels in
// flight); without (a prompt chunk's), the next kernel launches as this one's blocks exit: its launch
// still overlaps this kernel's end, but its blocks do not take the first SMs to free up while this
// kernel has more waves to start, which crowded them there (prompts 8-15 % slower on the H200).
// Launched plainly, both are no-ops. The translator passes `early` as every kernel's last argument
// (CudaKernelCall::early_dependents).
MSL_FN void await_previous_kernel(uint early) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (early) asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

template <class T>
MSL_FN T builtin(uint3 v);
template <class T>
MSL_FN T builtin(uint v);
template <>
MSL_FN uint builtin<uint>(uint v) { return v; }
template <>
MSL_FN ushort builtin<ushort>(uint v) { return ushort(v); }
template <>
MSL_FN uint builtin<uint>(uint3 v) { return v.x; }
template <>
MSL_FN ushort builtin<ushort>(uint3 v) { return ushort(v.x); }
template <>
MSL_FN uint2 builtin<uint2>(uint3 v) { return make_uint2(v.x, v.y); }
template <>
MSL_FN uint3 builtin<uint3>(uint3 v) { return v; }

}  // namespace msl_cuda
#else

// The MSL keywords, as macros over the address spaces; msl_end.h removes them after the shader text.
#define device MSL_AS_DEVICE
#define constant const MSL_AS_CONSTANT
#define threadgroup MSL_AS_THREADGROUP
#define thread
#endif
