// The memory side of the 4-bit expert kernels alone: how fast threadgroups shaped like
// moe_gate_up_tiled_q4_short's (128 threads, 64 gate and 64 up rows of 1,024 bytes, 32 K-steps of 32
// bytes per row) can read an expert layer's weights, with none of the kernel's arithmetic. Each warp
// reads 4 blocks of 8 rows per K-step, a lane 8 bytes of row lane / 4 (as simdgroup_q4_load does), and
// folds them into one word so that the loads stay. Variants:
//   rows     the stored layout: row-major rows, so a warp's load touches 8 rows x 32 bytes
//   blocked  the same bytes stored 8 rows x 32 bytes contiguous per block and K-step (a layout the
//            upload could write), so a warp's load is 256 contiguous bytes
// each with the next K-step's loads 1, 2 or 3 steps ahead (in registers) and a threadgroup barrier per
// K-step (the kernel has two), or with no barrier (then the compiler may move loads further ahead), at
// 5 threadgroups per SM as the kernel; and a
// plain grid-stride read of 16 bytes per lane as the ceiling. Two expert layers (536 MB) per pass,
// more than 10x the 50 MB L2. What the H200 measured: docs/reports/2026-12-03-h200-prompt-stall-sampling.md.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/weight-stream bench/gpu/weight-stream.cu && /tmp/weight-stream
#include <cstdint>
#include <cstdio>

#include "study.cuh"

constexpr int kExperts = 512;         // two layers of 256
constexpr int kRows = 512;            // rows of the gate (and of the up) per expert
constexpr int kRowBytes = 1024;       // K = 2,048 4-bit weights
constexpr int kSteps = kRowBytes / 32;
constexpr int kTileRows = 64;         // gate rows (and up rows) per threadgroup
constexpr size_t kMatrixBytes = size_t(kRows) * kRowBytes;
constexpr size_t kBytes = size_t(kExperts) * 2 * kMatrixBytes;

// Where lane `lane` of a warp reads row block `block` (8 rows from row 8 block) at K-step s.
template <bool Blocked>
__device__ __forceinline__ size_t offset(int block, int s, int lane) {
  if (Blocked) return (size_t(block) * kSteps + s) * 256 + (lane >> 2) * 32 + 8 * (lane & 3);
  return size_t(8 * block + (lane >> 2)) * kRowBytes + 32 * s + 8 * (lane & 3);
}

// A load and a use the compiler keeps in program order (asm volatile), so that each variant keeps the
// number of steps in flight it names.
__device__ __forceinline__ uint2 load8(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ void use(uint32_t& acc, uint2 v) { asm volatile("add.u32 %0, %0, %1;" : "+r"(acc) : "r"(v.x ^ v.y)); }

template <bool Blocked, int Ahead, bool Barrier>
__global__ void __launch_bounds__(128, 5) tiles(const uint8_t* w, uint32_t* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int expert = blockIdx.y, tile = blockIdx.x;
  const uint8_t* gate = w + size_t(expert) * 2 * kMatrixBytes;
  const uint8_t* up = gate + kMatrixBytes;
  // The warp's 4 row blocks: 2 of the gate, 2 of the up (16 rows of each), as the kernel's simdgroups.
  const int b0 = (kTileRows * tile + 16 * warp) / 8;
  const uint8_t* base[4] = {gate, gate, up, up};
  const int block[4] = {b0, b0 + 1, b0, b0 + 1};
  uint2 ring[Ahead][4];
#pragma unroll
  for (int a = 0; a < Ahead; ++a)
#pragma unroll
    for (int j = 0; j < 4; ++j) ring[a][j] = load8(base[j] + offset<Blocked>(block[j], a, lane));
  uint32_t acc = 0;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (Barrier) __syncthreads();
#pragma unroll
    for (int j = 0; j < 4; ++j) use(acc, ring[s % Ahead][j]);
    if (s + Ahead < kSteps)
#pragma unroll
      for (int j = 0; j < 4; ++j) ring[s % Ahead][j] = load8(base[j] + offset<Blocked>(block[j], s + Ahead, lane));
  }
  out[(size_t(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}

__global__ void stream(const uint4* w, size_t words, uint32_t* out) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = w[i];
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  out[size_t(blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}

template <class Launch>
void time(const char* name, Launch launch) {
  const Timing t = time_launches(launch);
  std::printf("%-52s %8.1f us per layer  %6.0f GB/s best  %6.0f GB/s mean\n", name, 1e3f * t.best_ms / 2,
              kBytes / (t.best_ms * 1e6f), kBytes / (t.mean_ms * 1e6f));
}

template <bool Blocked, int Ahead, bool Barrier>
void tiles_variant(const uint8_t* w, uint32_t* out) {
  char name[96];
  std::snprintf(name, sizeof name, "%s, %d step%s ahead%s", Blocked ? "blocked" : "rows", Ahead, Ahead > 1 ? "s" : "",
                Barrier ? ", a barrier per step" : ", no barrier (may load further)");
  time(name, [&] { tiles<Blocked, Ahead, Barrier><<<dim3(kRows / kTileRows, kExperts), 128>>>(w, out); });
}

int main() {
  uint8_t* w;
  uint32_t* out;
  CHECK(cudaMalloc(&w, kBytes));
  CHECK(cudaMemset(w, 0x5a, kBytes));
  CHECK(cudaMalloc(&out, size_t(kExperts) * (kRows / kTileRows) * 128 * sizeof(uint32_t)));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::printf("%.0f MB per pass (two layers of 256 experts' gate and up, 64 + 64 rows x 1,024 bytes per threadgroup)\n",
              kBytes / 1e6);
  time("stream, 16 bytes per lane", [&] { stream<<<sms * 8, 256>>>((const uint4*)w, kBytes / 16, out); });
  tiles_variant<false, 1, true>(w, out);
  tiles_variant<false, 1, false>(w, out);
  tiles_variant<false, 2, true>(w, out);
  tiles_variant<false, 3, true>(w, out);
  tiles_variant<true, 1, true>(w, out);
  tiles_variant<true, 1, false>(w, out);
  tiles_variant<true, 2, true>(w, out);
  tiles_variant<true, 3, true>(w, out);
  return 0;
}
