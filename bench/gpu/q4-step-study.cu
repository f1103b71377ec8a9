// Design study of the 4-bit expert kernels' K-step (moe_gate_up_tiled_q4_short's shape: threadgroups of
// 4 warps, each 4 blocks of 8 weight rows read straight into B fragments and dequantised in half
// arithmetic, tiles of 16 or 32 gathered token rows, K = 2,048 in 32 steps of 64 columns), timed on an
// expert layer's bytes (two layers, more than 10x the L2) with the arithmetic the kernel does, in two
// structures:
//   tile     as the kernels are: each step's activations fetched one step ahead into registers,
//            stored into a threadgroup tile, a barrier, A fragments by ldmatrix, the products, a barrier
//   direct   no threadgroup memory and no barriers: each warp loads its own A fragments from global
//            memory one step ahead, from activation rows stored so that a lane's 16 values of a step
//            are 32 contiguous bytes (a permutation within each 64-column block that the writer of
//            the rows would apply), so the 4 warps of a threadgroup each read the same rows (L1 hits)
// and two bounds: "arithmetic only" (the dequantisation and products on fixed fragments, no global
// loads) and "loads only" (direct's loads, no arithmetic); the tile structure also with 8 row blocks per
// warp (128 + 128 rows per threadgroup: each activation read feeds twice the weights). In the plain
// runs the scales and biases are constants and the rows are gathered without the bucket lookups; the
// "tile +" runs add what the kernel does around the K-step, one at a time and all together (Feature,
// below: staged scales, bucket lookups, the SwiGLU epilogue), and the same with the scales applied after
// the products instead of in the dequantisation ("mmq"). The values are meaningless; only the time is
// measured. What the H200 measured: docs/reports/2026-12-03-h200-prompt-stall-sampling.md, for the
// extras docs/reports/2026-12-04-h200-split-half-router-gemm.md, and for "mmq"
// docs/reports/2026-12-04-h200-deltanet-token-pairs.md.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/q4-step-study bench/gpu/q4-step-study.cu && /tmp/q4-step-study
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "study.cuh"

constexpr int kExperts = 512;  // two layers of 256
constexpr int kRows = 512;     // gate rows (and up rows) per expert
constexpr int kK = 2048;
constexpr int kRowBytes = kK / 2;
constexpr int kSteps = kK / 64;
constexpr int kTokens = 512;   // activation rows
constexpr size_t kMatrixBytes = size_t(kRows) * kRowBytes;
constexpr size_t kWeightBytes = size_t(kExperts) * 2 * kMatrixBytes;
constexpr int kLd = 64 + 8;  // the tile's halfs per row

enum Mode { Tile, Direct, ArithmeticOnly, LoadsOnly };

__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
  return d;
}
// The stored 4-bit values of k block `block` of one 8-row block, exact in half, in the B fragments' order
// (as msl.h's simdgroup_q4_dequantize before its scale and bias).
__device__ __forceinline__ void stored_values(uint2 q, int block, __half2& v0, __half2& v1) {
  const uint32_t byte = 4u * (block >> 1) + (block & 1);
  const uint32_t word = __byte_perm(q.x, q.y, byte | ((byte + 2u) << 8));
  const uint32_t p0 = lop3_and_or(word, 0x000F000Fu, 0x64006400u), p1 = lop3_and_or(word, 0x00F000F0u, 0x54005400u);
  const __half2 k1024 = __halves2half2(__ushort_as_half(0x6400u), __ushort_as_half(0x6400u));
  const __half2 k64 = __halves2half2(__ushort_as_half(0x5400u), __ushort_as_half(0x5400u));
  v0 = __hsub2(*reinterpret_cast<const __half2*>(&p0), k1024);
  v1 = __hsub2(*reinterpret_cast<const __half2*>(&p1), k64);
}
__device__ __forceinline__ uint32_t bits(__half2 v) { return *reinterpret_cast<const uint32_t*>(&v); }
// The B fragments of k block `block` of one 8-row block, dequantised: v · s + b.
__device__ __forceinline__ void dequant(uint2 q, int block, __half2 s, __half2 b, uint32_t& w0, uint32_t& w1) {
  __half2 v0, v1;
  stored_values(q, block, v0, v1);
  w0 = bits(__hfma2(v0, s, b));
  w1 = bits(__hfma2(v1, s, b));
}
__device__ __forceinline__ void mma(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ldsm4(uint32_t* a, const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(uint32_t(__cvta_generic_to_shared(p))));
}

// Threadgroup (row tile, expert): Tokens gathered rows (token (expert·7 + tile·Tokens + i) mod kTokens);
// each warp RB blocks of 8 rows, half of the gate and half of the up (RB 4: 64 + 64 rows per threadgroup,
// as the kernels; RB 8: 128 + 128, so that each activation read feeds twice the weights).
// What the kernel adds around the K-step, in the tile structure (bits of F): kScales, the rows' bf16
// scales and biases staged as half pairs every 8 steps (each thread 4 groups of a gate and an up row,
// loads before stores) and read per step by each warp for its row blocks; kLookups, the tile's rows
// found through the bucket lists (tile -> bucket offsets -> entries) instead of computed; kEpilogue,
// silu(gate) · up of the results written as halfs through per-warp slabs. kScales in two halves:
// kStaging, the staging alone (the dequantisation takes constants), and kScaleReads, the per-step reads
// alone (of scales staged once, before the first step).
// kMmq (with kScales): the products on the stored 4-bit values themselves, q exact in half, into a
// per-step accumulator P; each row's sums of the step's activations by one more product with a B of
// ones (xs, in the accumulator's layout); then acc += s·P + b·xs per step, the scales read from the
// staged pairs once per step and row pair. No scale or bias reaches the tensor cores' operands. P and
// xs take registers: these builds run 4 threadgroups per SM (128 registers), the others 5 (96).
enum Feature { kScales = 1, kLookups = 2, kEpilogue = 4, kStaging = 8, kScaleReads = 16, kMmq = 32 };
struct Extras {
  const uint16_t* scales;   // [expert][gate, up][row][group] bf16
  const uint16_t* biases;
  const uint32_t* tiles;    // [1 + threadgroup row]: expert << 16
  const uint32_t* offsets;  // [expert + 1]: where each bucket begins in entries
  const uint32_t* entries;  // token · 8 + slot, in bucket order
  __half* h;                // [bucket row][kRows]
};

template <int Tokens, Mode M, int RB, int F>
__global__ void __launch_bounds__(128, (F & kMmq) ? 4 : 5) step(const uint8_t* w, const uint4* x, float* out, Extras ex) {
  constexpr int Pairs = Tokens / 16;  // pairs of 8-token blocks
  __shared__ __align__(16) __half tile[Tokens * kLd];
  __shared__ int row_of[Tokens];
  __shared__ __align__(16) uint32_t staged[F ? 2 * 8 * 128 : 1];  // the scales' pairs, then the slabs
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int expert = (F & kLookups) ? int(ex.tiles[1 + blockIdx.y] >> 16) : int(blockIdx.y);
  if (tid < Tokens) {
    if (F & kLookups) {
      const uint32_t begin = ex.offsets[expert], count = ex.offsets[expert + 1] - begin;
      row_of[tid] = int(ex.entries[begin + min(uint32_t(tid), count - 1)] / 8);
    } else {
      row_of[tid] = (expert * 7 + blockIdx.x * Tokens + tid) % kTokens;
    }
  }
  __syncthreads();
  const uint8_t* gate = w + size_t(expert) * 2 * kMatrixBytes;
  const uint8_t* up = gate + kMatrixBytes;
  const int r0 = 16 * RB * blockIdx.x + 4 * RB * warp;  // the warp's first gate (and up) row
  const uint8_t* rows[RB];
#pragma unroll
  for (int j = 0; j < RB; ++j) rows[j] = (j < RB / 2 ? gate : up) + size_t(r0 + 8 * (j % (RB / 2))) * kRowBytes;
  auto weights = [&](int s, uint2* q) {
#pragma unroll
    for (int j = 0; j < RB; ++j) q[j] = *(const uint2*)(rows[j] + (lane >> 2) * kRowBytes + 32 * s + 8 * (lane & 3));
  };
  // tile: this thread's run of 8 halfs of the step (Tokens x 64 halfs over 128 threads: Tokens / 16 runs).
  constexpr int Runs = Tokens * 8 / 128;
  auto runs = [&](int s, uint4* r) {
#pragma unroll
    for (int i = 0; i < Runs; ++i) {
      const int q = tid + 128 * i;
      r[i] = x[(size_t(row_of[q / 8]) * kK + 64 * s + 8 * (q % 8)) / 8];
    }
  };
  // direct: the lane's A values of the step for its rows g and g + 8 of each pair: 2 x 32 bytes each.
  auto direct = [&](int s, uint4* a) {
#pragma unroll
    for (int p = 0; p < Pairs; ++p)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const size_t row = row_of[16 * p + 8 * h + (lane >> 2)];
        const uint4* at = x + (row * kK + 64 * s + 16 * (lane & 3)) / 8;
        a[4 * p + 2 * h] = at[0];
        a[4 * p + 2 * h + 1] = at[1];
      }
  };
  const __half2 sc = __float2half2_rn(0.01f), bi = __float2half2_rn(-0.07f);
  // kScales: this thread stages groups 4 (tid % 2) .. +3 of a stage for gate row and up row tid / 2.
  const int srow = 16 * RB * blockIdx.x + tid / 2;
  const size_t sbase = (size_t(expert) * 2 * kRows + srow) * kSteps + 4 * (tid % 2);
  auto stage = [&](int s) {
    uint2 v[4];
    v[0] = *(const uint2*)(ex.scales + sbase + s);
    v[1] = *(const uint2*)(ex.biases + sbase + s);
    v[2] = *(const uint2*)(ex.scales + sbase + size_t(kRows) * kSteps + s);
    v[3] = *(const uint2*)(ex.biases + sbase + size_t(kRows) * kSteps + s);
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int slot = 4 * (tid % 2) + e, r = tid / 2 + 64 * m;
        const uint32_t sw = e < 2 ? v[2 * m].x : v[2 * m].y, bw = e < 2 ? v[2 * m + 1].x : v[2 * m + 1].y;
        const uint16_t sb = uint16_t(sw >> (16 * (e & 1))), bb = uint16_t(bw >> (16 * (e & 1)));
        const uint16_t sh = __half_as_ushort(__float2half(__uint_as_float(uint32_t(sb) << 16)));
        const uint16_t bh = __half_as_ushort(__float2half(__uint_as_float(uint32_t(bb) << 16)));
        staged[2 * (slot * 128 + r)] = 0x10001u * sh;
        staged[2 * (slot * 128 + r) + 1] = 0x10001u * bh;
      }
  };
  // Block j's first row among the staged pairs (gate rows 0-63, up rows 64-127 of the threadgroup).
  auto staged_row = [&](int j) { return (j < RB / 2 ? 0 : 64) + 4 * RB * warp + 8 * (j % (RB / 2)); };
  // The A fragments of token pair p, k block `block`, from the tile.
  auto tile_fragment = [&](uint32_t* af, int p, int block) {
    const int quad = lane >> 3;
    ldsm4(af, tile + (16 * p + 8 * (quad & 1) + (lane & 7)) * kLd + 16 * block + 8 * (quad >> 1));
  };
  float acc[Pairs][RB][4] = {};
  uint2 q[RB], qn[RB];
  uint4 r[Runs > 0 ? Runs : 1], a[4 * Pairs];
  if (M != ArithmeticOnly) weights(0, q);
  else
    for (int j = 0; j < RB; ++j) q[j] = make_uint2(0x12345678u * (lane + j), 0x9abcdef0u ^ lane);
  if (M == Tile) runs(0, r);
  if (M == Direct || M == LoadsOnly) direct(0, a);
  if (M == ArithmeticOnly)
    for (int i = 0; i < 4 * Pairs; ++i) a[i] = make_uint4(0x3c003c00u, lane, i, 0x3c00u);
#pragma unroll 1
  for (int s = 0; s < kSteps; ++s) {
    const int next = s + 1 < kSteps ? s + 1 : s;
    uint4 an[4 * Pairs];
    if (M == Tile) {
      if ((F & (kScales | kStaging)) && s % 8 == 0) stage(s);
      if ((F & kScaleReads) && s == 0) stage(s);
#pragma unroll
      for (int i = 0; i < Runs; ++i) {
        const int qi = tid + 128 * i;
        *(uint4*)(tile + (qi / 8) * kLd + 8 * (qi % 8)) = r[i];
      }
      __syncthreads();
      runs(next, r);
    }
    if (M == Direct || M == LoadsOnly) direct(next, an);
    if (M != ArithmeticOnly) weights(next, qn);
    if (M == LoadsOnly) {
#pragma unroll
      for (int j = 0; j < RB; ++j) acc[0][j][0] += __uint_as_float((q[j].x ^ q[j].y) & 0x3fffffffu);
#pragma unroll
      for (int i = 0; i < 4 * Pairs; ++i) acc[0][0][1] += __uint_as_float((a[i].x ^ a[i].w) & 0x3fffffffu);
    } else {
      if (F & kMmq) {
        float P[Pairs][RB][4] = {}, xs[Pairs][4] = {};
        const uint32_t ones = 0x3c003c00u;
#pragma unroll
        for (int block = 0; block < 4; ++block) {
          uint32_t b0[RB], b1[RB];
#pragma unroll
          for (int j = 0; j < RB; ++j) {
            __half2 v0, v1;
            stored_values(q[j], block, v0, v1);
            b0[j] = bits(v0), b1[j] = bits(v1);
          }
#pragma unroll
          for (int p = 0; p < Pairs; ++p) {
            uint32_t af[4];
            tile_fragment(af, p, block);
#pragma unroll
            for (int j = 0; j < RB; ++j) mma(P[p][j], af, b0[j], b1[j]);
            mma(xs[p], af, ones, ones);
          }
        }
#pragma unroll
        for (int j = 0; j < RB; ++j) {  // columns 2 (lane % 4) and + 1 of block j: rows r, r + 1
          const uint4 v = *(const uint4*)(staged + 2 * ((s % 8) * 128 + staged_row(j) + 2 * (lane & 3)));
          const float s0 = __low2float(*reinterpret_cast<const __half2*>(&v.x)), b0 = __low2float(*reinterpret_cast<const __half2*>(&v.y));
          const float s1 = __low2float(*reinterpret_cast<const __half2*>(&v.z)), b1 = __low2float(*reinterpret_cast<const __half2*>(&v.w));
#pragma unroll
          for (int p = 0; p < Pairs; ++p) {
            acc[p][j][0] += s0 * P[p][j][0] + b0 * xs[p][0];
            acc[p][j][1] += s1 * P[p][j][1] + b1 * xs[p][1];
            acc[p][j][2] += s0 * P[p][j][2] + b0 * xs[p][2];
            acc[p][j][3] += s1 * P[p][j][3] + b1 * xs[p][3];
          }
        }
      } else
#pragma unroll
      for (int block = 0; block < 4; ++block) {
        uint32_t b0[RB], b1[RB];
#pragma unroll
        for (int j = 0; j < RB; ++j) {
          __half2 js = sc, jb = bi;
          if (F & (kScales | kScaleReads)) {  // row lane / 4 of block j: gate rows 16 warp + 8 j, up rows 64 + ...
            const uint2 v = *(const uint2*)(staged + 2 * ((s % 8) * 128 + staged_row(j) + (lane >> 2)));
            js = *reinterpret_cast<const __half2*>(&v.x);
            jb = *reinterpret_cast<const __half2*>(&v.y);
          }
          dequant(q[j], block, js, jb, b0[j], b1[j]);
        }
#pragma unroll
        for (int p = 0; p < Pairs; ++p) {
          uint32_t af[4];
          if (M == Tile) {
            tile_fragment(af, p, block);
          } else {
            // the k block's 4 words of the lane's rows g (a[4p], a[4p+1]) and g + 8 (a[4p+2], a[4p+3])
            const uint4 lo = block < 2 ? a[4 * p] : a[4 * p + 1], hi = block < 2 ? a[4 * p + 2] : a[4 * p + 3];
            const bool odd = block & 1;
            af[0] = odd ? lo.z : lo.x;
            af[1] = odd ? hi.z : hi.x;
            af[2] = odd ? lo.w : lo.y;
            af[3] = odd ? hi.w : hi.y;
          }
#pragma unroll
          for (int j = 0; j < RB; ++j) mma(acc[p][j], af, b0[j], b1[j]);
        }
      }
    }
    if (M != ArithmeticOnly)
#pragma unroll
      for (int j = 0; j < RB; ++j) q[j] = qn[j];
    if (M == Direct || M == LoadsOnly)
#pragma unroll
      for (int i = 0; i < 4 * Pairs; ++i) a[i] = an[i];
    if (M == Tile) __syncthreads();
  }
  if (F & kEpilogue) {
    // Per warp a slab of 8 tokens x 32 results (16 gate, 16 up rows) in the staged memory; lane l takes
    // row l % 16 of tokens 2m + l / 16.
    float* slab = reinterpret_cast<float*>(staged) + warp * 8 * 36;
    const int c = lane % 16, row = 16 * RB * blockIdx.x + 4 * RB * warp + c;
#pragma unroll
    for (int p = 0; p < Pairs; ++p)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int j = 0; j < RB; ++j) {
          const int col = 8 * j + 2 * (lane & 3);
          slab[(lane >> 2) * 36 + col] = acc[p][j][2 * half];
          slab[(lane >> 2) * 36 + col + 1] = acc[p][j][2 * half + 1];
        }
        __syncwarp();
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int t = 2 * m + lane / 16, token = 16 * p + 8 * half + t;
          const float g = slab[t * 36 + c], u = slab[t * 36 + 16 + c];
          ex.h[(size_t(expert) * Tokens + token) * kRows + row] = __float2half(g / (1.0f + __expf(-g)) * u);
        }
        __syncwarp();
      }
    return;
  }
  float sum = 0;
#pragma unroll
  for (int p = 0; p < Pairs; ++p)
#pragma unroll
    for (int j = 0; j < RB; ++j) sum += acc[p][j][0] + acc[p][j][1] + acc[p][j][2] + acc[p][j][3];
  out[(size_t(blockIdx.y) * gridDim.x + blockIdx.x) * 128 + tid] = sum;
}

template <int Tokens, Mode M, int RB = 4, int F = 0>
void time(const char* name, const uint8_t* w, const uint4* x, float* out, const Extras& ex = Extras{}) {
  const dim3 grid(kRows / (16 * RB), kExperts);
  const Timing t = time_launches([&] { step<Tokens, M, RB, F><<<grid, 128>>>(w, x, out, ex); });
  std::printf("%2d tokens, %d row blocks per warp, %-18s %8.1f us per layer (best), %8.1f mean, weights at %5.0f GB/s\n",
              Tokens, RB, name, 1e3f * t.best_ms / 2, 1e3f * t.mean_ms / 2, kWeightBytes / (t.best_ms * 1e6f));
}

int main() {
  uint8_t* w;
  uint4* x;
  float* out;
  CHECK(cudaMalloc(&w, kWeightBytes));
  CHECK(cudaMemset(w, 0x37, kWeightBytes));
  CHECK(cudaMalloc(&x, size_t(kTokens) * kK * 2));
  CHECK(cudaMemset(x, 0x1c, size_t(kTokens) * kK * 2));
  CHECK(cudaMalloc(&out, size_t(kExperts) * (kRows / 64) * 128 * sizeof(float)));
  // The extras: scales 0.01 and biases -0.07 (bf16); bucket e holds 32 entries of scattered tokens.
  const size_t groups = size_t(kExperts) * 2 * kRows * kSteps;
  std::vector<uint16_t> hs(groups, 0x3c24), hb(groups, 0xbd8f);
  std::vector<uint32_t> tiles(1 + kExperts), offsets(kExperts + 1), entries(size_t(kExperts) * 32);
  tiles[0] = kExperts;
  for (int e = 0; e < kExperts; ++e) tiles[1 + e] = uint32_t(e) << 16;
  for (int e = 0; e <= kExperts; ++e) offsets[e] = 32u * e;
  for (size_t i = 0; i < entries.size(); ++i) entries[i] = uint32_t((i * 37 + 11) % kTokens * 8 + i % 8);
  Extras ex{};
  auto upload = [](const auto& v) {
    void* d;
    CHECK(cudaMalloc(&d, v.size() * sizeof(v[0])));
    CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice));
    return d;
  };
  ex.scales = static_cast<const uint16_t*>(upload(hs));
  ex.biases = static_cast<const uint16_t*>(upload(hb));
  ex.tiles = static_cast<const uint32_t*>(upload(tiles));
  ex.offsets = static_cast<const uint32_t*>(upload(offsets));
  ex.entries = static_cast<const uint32_t*>(upload(entries));
  CHECK(cudaMalloc(&ex.h, size_t(kExperts) * 32 * kRows * sizeof(__half)));
  std::printf("one expert layer's gate and up (%.0f MB), 256 experts' threadgroups of 64 + 64 rows (or 128 + 128), K = %d\n",
              kWeightBytes / 2e6, kK);
  for (int round = 0; round < 2; ++round) {
    time<16, Tile>("tile", w, x, out);
    time<16, Direct>("direct", w, x, out);
    time<16, ArithmeticOnly>("arithmetic only", w, x, out);
    time<16, LoadsOnly>("loads only", w, x, out);
    time<32, Tile>("tile", w, x, out);
    time<32, Direct>("direct", w, x, out);
    time<32, ArithmeticOnly>("arithmetic only", w, x, out);
    time<32, LoadsOnly>("loads only", w, x, out);
    time<16, Tile, 8>("tile", w, x, out);
    time<16, ArithmeticOnly, 8>("arithmetic only", w, x, out);
    time<16, LoadsOnly, 8>("loads only", w, x, out);
    time<16, Tile, 4, kScales>("tile + scales", w, x, out, ex);
    time<16, Tile, 4, kLookups>("tile + lookups", w, x, out, ex);
    time<16, Tile, 4, kEpilogue>("tile + epilogue", w, x, out, ex);
    time<16, Tile, 4, kScales | kLookups | kEpilogue>("tile + all 3", w, x, out, ex);
    time<32, Tile, 4, kScales>("tile + scales", w, x, out, ex);
    time<32, Tile, 4, kLookups>("tile + lookups", w, x, out, ex);
    time<32, Tile, 4, kEpilogue>("tile + epilogue", w, x, out, ex);
    time<32, Tile, 4, kScales | kLookups | kEpilogue>("tile + all 3", w, x, out, ex);
    time<16, Tile, 4, kStaging>("tile + staging", w, x, out, ex);
    time<16, Tile, 4, kScaleReads>("tile + scale reads", w, x, out, ex);
    time<32, Tile, 4, kStaging>("tile + staging", w, x, out, ex);
    time<32, Tile, 4, kScaleReads>("tile + scale reads", w, x, out, ex);
    time<16, Tile, 4, kScales | kMmq>("tile + scales, mmq", w, x, out, ex);
    time<32, Tile, 4, kScales | kMmq>("tile + scales, mmq", w, x, out, ex);
    time<16, Tile, 4, kScales | kMmq | kLookups | kEpilogue>("all 3, mmq", w, x, out, ex);
    time<32, Tile, 4, kScales | kMmq | kLookups | kEpilogue>("all 3, mmq", w, x, out, ex);
  }
  return 0;
}
