// GEMV design study for the decode path (4-bit MLX affine weights, group 64, bf16 scales and biases,
// fp32 activations), run on the H200: several ways to split a row-major quantized GEMV over warps,
// timed on the model's shapes with enough copies of each matrix to defeat the 50 MB L2 (and again on one
// copy, read from the L2 where it fits), each checked against the first. The winner is what
// shaders/common.h rows_dot implements (B R=2 U=2); this file records why. H and I take the products in
// half2 (fp16 products and sums within a word or chunk): fewer instructions, 6e-4 to 1.3e-3 of the
// row's scale instead of 2e-7 (docs/reports/2026-12-04-h200-gemv-half-products.md). Q and P quantise x
// per block first and multiply in integers: Q to int8 (as llama.cpp's q8_1, dp4a), P to int16 (dp2a),
// the fp16 precision's decode GEMV (shaders/common.h rows_dot_int16, P with a 16-byte block per lane:
// docs/reports/2026-12-04-h200-int16-decode.md). M keeps fp32 accuracy on the tensor cores (x as three
// half pieces): for the exact GEMVs (the lm_head, the router).
//
//   nvcc -O3 -arch=sm_90 -o /tmp/gemv-variants bench/gpu/gemv-variants.cu && /tmp/gemv-variants
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <random>
#include <vector>

#include <cuda_fp16.h>

#include "study.cuh"

constexpr int kGroup = 64;

__device__ __forceinline__ float bf(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }
__device__ __forceinline__ float unq(uint32_t w, int s) {
  return __uint_as_float(((w >> s) & 15u) | 0x4B000000u) - 8388608.f;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float word_dot(uint32_t q, const float* xv) {
  float s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += unq(q, 4 * i) * xv[i];
  return s;
}

struct Mat {
  const uint8_t* w;
  const uint16_t* s;
  const uint16_t* b;
  int rows, cols;
};

// A: one warp per row, a 16-byte chunk (32 weights) per lane, x read from global memory.
__global__ void gemv_a(Mat m, const float* x, float* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + warp;
  if (row >= m.rows) return;
  const int rb = m.cols / 2, chunks = rb / 16, gpr = m.cols / kGroup;
  float acc = 0;
  for (int c = lane; c < chunks; c += 32) {
    const uint4 q = reinterpret_cast<const uint4*>(m.w + size_t(row) * rb)[c];
    const uint32_t qs[4] = {q.x, q.y, q.z, q.w};
    float qx = 0, xs = 0;
    for (int k = 0; k < 4; ++k) {
      const float4 a = reinterpret_cast<const float4*>(x)[c * 8 + 2 * k];
      const float4 b = reinterpret_cast<const float4*>(x)[c * 8 + 2 * k + 1];
      const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      qx += word_dot(qs[k], xv);
      xs += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
    }
    const int g = c * 32 / kGroup;
    acc += bf(m.s[size_t(row) * gpr + g]) * qx + bf(m.b[size_t(row) * gpr + g]) * xs;
  }
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc;
}

// B: R rows per warp, lane l takes 4-byte words l, l+32, ... (U of them loaded before any is used),
// x read from global memory once per word for the R rows.
template <int R, int U>
__global__ void gemv_b(Mat m, const float* x, float* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (blockDim.x / 32) + warp) * R;
  if (row0 >= m.rows) return;
  const int words = m.cols / 8, gpr = m.cols / kGroup;
  float acc[R] = {};
  for (int w0 = lane; w0 < words; w0 += 32 * U) {
    uint32_t q[U][R];
    float sc[U][R], bi[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int wi = w0 + 32 * u, row = min(row0 + r, m.rows - 1), g = wi * 8 / kGroup;
        q[u][r] = reinterpret_cast<const uint32_t*>(m.w + size_t(row) * (m.cols / 2))[wi];
        sc[u][r] = bf(m.s[size_t(row) * gpr + g]);
        bi[u][r] = bf(m.b[size_t(row) * gpr + g]);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int wi = w0 + 32 * u;
      const float4 a = reinterpret_cast<const float4*>(x)[2 * wi];
      const float4 b = reinterpret_cast<const float4*>(x)[2 * wi + 1];
      const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      const float xs = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += sc[u][r] * word_dot(q[u][r], xv) + bi[u][r] * xs;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < m.rows) y[row0 + r] = v;
  }
}

// D: llama.cpp's shape: a block of 128 threads per row, 8 bytes (16 weights) per thread per pass.
__global__ void gemv_d(Mat m, const float* x, float* y) {
  __shared__ float part[4];
  const int row = blockIdx.x, t = threadIdx.x;
  const int gpr = m.cols / kGroup, pairs = m.cols / 16;
  float acc = 0;
  for (int p = t; p < pairs; p += blockDim.x) {
    const uint2 q = reinterpret_cast<const uint2*>(m.w + size_t(row) * (m.cols / 2))[p];
    const float4* x4 = reinterpret_cast<const float4*>(x) + 4 * p;
    const float4 a = x4[0], b = x4[1], c = x4[2], d = x4[3];
    const float xa[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}, xb[8] = {c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
    const float xs = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w + c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
    const int g = p * 16 / kGroup;
    acc += bf(m.s[size_t(row) * gpr + g]) * (word_dot(q.x, xa) + word_dot(q.y, xb)) + bf(m.b[size_t(row) * gpr + g]) * xs;
  }
  acc = warp_sum(acc);
  if (t % 32 == 0) part[t / 32] = acc;
  __syncthreads();
  if (t == 0) y[row] = part[0] + part[1] + part[2] + part[3];
}

// E: R rows per warp, a 16-byte chunk per lane per row, x staged in shared memory transposed so that
// the float4 a lane needs for chunk c sits at [k][c] (consecutive lanes, consecutive addresses).
template <int R>
__global__ void gemv_e(Mat m, const float* x, float* y) {
  extern __shared__ float4 sx[];
  const int chunks = m.cols / 32;  // 16-byte chunks per row
  for (int i = threadIdx.x; i < m.cols / 4; i += blockDim.x) sx[(i % 8) * chunks + i / 8] = reinterpret_cast<const float4*>(x)[i];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (blockDim.x / 32) + warp) * R;
  if (row0 >= m.rows) return;
  const int gpr = m.cols / kGroup;
  float acc[R] = {};
  for (int c = lane; c < chunks; c += 32) {
    uint4 q[R];
    float sc[R], bi[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = min(row0 + r, m.rows - 1), g = c * 32 / kGroup;
      q[r] = reinterpret_cast<const uint4*>(m.w + size_t(row) * (m.cols / 2))[c];
      sc[r] = bf(m.s[size_t(row) * gpr + g]);
      bi[r] = bf(m.b[size_t(row) * gpr + g]);
    }
    float xv[32], xs = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float4 v = sx[k * chunks + c];
      xv[4 * k] = v.x, xv[4 * k + 1] = v.y, xv[4 * k + 2] = v.z, xv[4 * k + 3] = v.w;
      xs += v.x + v.y + v.z + v.w;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float qx = word_dot(q[r].x, xv) + word_dot(q[r].y, xv + 8) + word_dot(q[r].z, xv + 16) + word_dot(q[r].w, xv + 24);
      acc[r] += sc[r] * qx + bi[r] * xs;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < m.rows) y[row0 + r] = v;
  }
}

// G: R rows per warp, a 16-byte chunk (32 weights, half a group) per lane and row, so one scale and one
// bias per chunk; nibbles taken in place under the exponent of 2^23 (a half-word's nibble i is q·16^i
// there, no shift), against x pre-scaled by 16^-i once per chunk for all R rows: the same products.
template <int R>
__global__ void gemv_g(Mat m, const float* x, float* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (blockDim.x / 32) + warp) * R;
  if (row0 >= m.rows) return;
  const int chunks = m.cols / 32, gpr = m.cols / kGroup;
  float acc[R] = {};
  for (int c = lane; c < chunks; c += 32) {
    uint4 q[R];
    float sc[R], bi[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = min(row0 + r, m.rows - 1);
      q[r] = reinterpret_cast<const uint4*>(m.w + size_t(row) * (m.cols / 2))[c];
      sc[r] = bf(m.s[size_t(row) * gpr + c / 2]);
      bi[r] = bf(m.b[size_t(row) * gpr + c / 2]);
    }
    float xv[32], xs = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float4 v = reinterpret_cast<const float4*>(x)[c * 8 + k];
      xv[4 * k] = v.x, xv[4 * k + 1] = v.y * 0.0625f, xv[4 * k + 2] = v.z * 0.00390625f, xv[4 * k + 3] = v.w * 0.000244140625f;
      xs += v.x + v.y + v.z + v.w;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t ws[4] = {q[r].x, q[r].y, q[r].z, q[r].w};
      float qx = 0;
#pragma unroll
      for (int h = 0; h < 8; ++h) {
        const uint32_t u = ((ws[h / 2] >> (16 * (h % 2))) & 0xffffu) | 0x4B000000u;
#pragma unroll
        for (int i = 0; i < 4; ++i) qx += (__uint_as_float(u & (0x4B000000u | (15u << (4 * i)))) - 8388608.f) * xv[4 * h + i];
      }
      acc[r] += sc[r] * qx + bi[r] * xs;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < m.rows) y[row0 + r] = v;
  }
}

// The 4-bit products of one word on half2 pairs (elements j and j + 4 of the word's 8): a masked pair of
// nibbles under the exponent of 1024 (low nibbles of a byte: 1024 + q exactly) or of 64 (high nibbles:
// 64 + q), the offset subtracted exactly, then two products per instruction; x as half2 pairs
// (x0,x4) (x1,x5) (x2,x6) (x3,x7). Returns the word's sum as a float (fp16 products and sums).
__device__ __forceinline__ __half2 word_dot_h2(uint32_t v, const __half2* xp, __half2 acc) {
  const __half2 k1024 = __float2half2_rn(1024.f), k64 = __float2half2_rn(64.f);
  const uint32_t v8 = v >> 8;
  uint32_t p[4];
  asm("lop3.b32 %0, %1, 0x000F000F, 0x64006400, 0xEA;" : "=r"(p[0]) : "r"(v));
  asm("lop3.b32 %0, %1, 0x00F000F0, 0x54005400, 0xEA;" : "=r"(p[1]) : "r"(v));
  asm("lop3.b32 %0, %1, 0x000F000F, 0x64006400, 0xEA;" : "=r"(p[2]) : "r"(v8));
  asm("lop3.b32 %0, %1, 0x00F000F0, 0x54005400, 0xEA;" : "=r"(p[3]) : "r"(v8));
  acc = __hfma2(__hsub2(reinterpret_cast<const __half2&>(p[0]), k1024), xp[0], acc);
  acc = __hfma2(__hsub2(reinterpret_cast<const __half2&>(p[1]), k64), xp[1], acc);
  acc = __hfma2(__hsub2(reinterpret_cast<const __half2&>(p[2]), k1024), xp[2], acc);
  acc = __hfma2(__hsub2(reinterpret_cast<const __half2&>(p[3]), k64), xp[3], acc);
  return acc;
}
__device__ __forceinline__ float h2_sum(__half2 v) { const float2 f = __half22float2(v); return f.x + f.y; }

// H: as B (R rows per warp, 4-byte words, U loaded before any is used), the products in half2
// (word_dot_h2), x rounded to half once per word for the R rows; fp32 across words.
template <int R, int U>
__global__ void gemv_h(Mat m, const float* x, float* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (blockDim.x / 32) + warp) * R;
  if (row0 >= m.rows) return;
  const int words = m.cols / 8, gpr = m.cols / kGroup;
  float acc[R] = {};
  for (int w0 = lane; w0 < words; w0 += 32 * U) {
    uint32_t q[U][R];
    float sc[U][R], bi[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int wi = w0 + 32 * u, row = min(row0 + r, m.rows - 1), g = wi * 8 / kGroup;
        q[u][r] = reinterpret_cast<const uint32_t*>(m.w + size_t(row) * (m.cols / 2))[wi];
        sc[u][r] = bf(m.s[size_t(row) * gpr + g]);
        bi[u][r] = bf(m.b[size_t(row) * gpr + g]);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int wi = w0 + 32 * u;
      const float4 a = reinterpret_cast<const float4*>(x)[2 * wi];
      const float4 b = reinterpret_cast<const float4*>(x)[2 * wi + 1];
      const __half2 xp[4] = {__floats2half2_rn(a.x, b.x), __floats2half2_rn(a.y, b.y), __floats2half2_rn(a.z, b.z),
                             __floats2half2_rn(a.w, b.w)};
      const float xs = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += sc[u][r] * h2_sum(word_dot_h2(q[u][r], xp, __float2half2_rn(0.f))) + bi[u][r] * xs;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < m.rows) y[row0 + r] = v;
  }
}

// I: R rows per warp, a 16-byte chunk (32 weights, half a group: one scale and bias) per lane and row,
// the chunk's products summed in half2 (word_dot_h2) before one conversion.
template <int R>
__global__ void gemv_i(Mat m, const float* x, float* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (blockDim.x / 32) + warp) * R;
  if (row0 >= m.rows) return;
  const int chunks = m.cols / 32, gpr = m.cols / kGroup;
  float acc[R] = {};
  for (int c = lane; c < chunks; c += 32) {
    uint4 q[R];
    float sc[R], bi[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = min(row0 + r, m.rows - 1);
      q[r] = reinterpret_cast<const uint4*>(m.w + size_t(row) * (m.cols / 2))[c];
      sc[r] = bf(m.s[size_t(row) * gpr + c / 2]);
      bi[r] = bf(m.b[size_t(row) * gpr + c / 2]);
    }
    __half2 xp[16];
    float xs = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 a = reinterpret_cast<const float4*>(x)[c * 8 + 2 * k];
      const float4 b = reinterpret_cast<const float4*>(x)[c * 8 + 2 * k + 1];
      xp[4 * k] = __floats2half2_rn(a.x, b.x), xp[4 * k + 1] = __floats2half2_rn(a.y, b.y);
      xp[4 * k + 2] = __floats2half2_rn(a.z, b.z), xp[4 * k + 3] = __floats2half2_rn(a.w, b.w);
      xs += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      __half2 h = word_dot_h2(q[r].x, xp, __float2half2_rn(0.f));
      h = word_dot_h2(q[r].y, xp + 4, h);
      h = word_dot_h2(q[r].z, xp + 8, h);
      h = word_dot_h2(q[r].w, xp + 12, h);
      acc[r] += sc[r] * h2_sum(h) + bi[r] * xs;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < m.rows) y[row0 + r] = v;
  }
}

struct Shape {
  const char* name;
  int rows, cols;
};

// The integer variants' activation words. Q: x quantised to int8 per group of 64 (llama.cpp's q8_1
// idea); each word's low and high nibbles against the group's even and odd columns of x (packed so by
// the quantiser) in two dp4a. P: x in int16 per group of 64 (32,767 at the group's largest |x|); four
// dp2a per word, each two 16-bit x against two of the word's nibbles spread to bytes (x packed per word
// as [x0|x2] [x4|x6] [x1|x3] [x5|x7]).
struct Int8Words {
  using X = uint2;
  __device__ static int dot(uint32_t q, X x, int acc) {
    acc = __dp4a(int(q & 0x0F0F0F0Fu), int(x.x), acc);
    return __dp4a(int((q >> 4) & 0x0F0F0F0Fu), int(x.y), acc);
  }
};
struct Int16Words {
  using X = uint4;
  __device__ static int dot(uint32_t q, X x, int acc) {
    const uint32_t lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
    acc = __dp2a_lo(int(x.x), int(lo), acc);
    acc = __dp2a_hi(int(x.y), int(lo), acc);
    acc = __dp2a_lo(int(x.z), int(hi), acc);
    return __dp2a_hi(int(x.w), int(hi), acc);
  }
};

// Q and P: the integer GEMV on activation words W (Int8Words, Int16Words): scale · dx · Σq·xq + bias · Σx
// (Σx of the word's 8 columns, exact). C: the word count per lane (1: a word as B; 4: a 16-byte chunk,
// half a group, summed in int before one conversion).
template <class W, int R, int C>
__global__ void gemv_int(Mat m, const typename W::X* xq, const float* dx, const float* xs, float* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * (blockDim.x / 32) + warp) * R;
  if (row0 >= m.rows) return;
  const int words = m.cols / 8, gpr = m.cols / kGroup, chunks = words / C;
  float acc[R] = {};
  for (int c0 = lane; c0 < chunks; c0 += 64) {
    uint32_t q[2][R][C];
    float sc[2][R], bi[2][R];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int ci = min(c0 + 32 * u, chunks - 1), row = min(row0 + r, m.rows - 1), g = ci * C * 8 / kGroup;
        const uint32_t* src = reinterpret_cast<const uint32_t*>(m.w + size_t(row) * (m.cols / 2)) + ci * C;
        if constexpr (C == 4) {
          const uint4 v = *reinterpret_cast<const uint4*>(src);
          q[u][r][0] = v.x, q[u][r][C > 1 ? 1 : 0] = v.y, q[u][r][C > 2 ? 2 : 0] = v.z, q[u][r][C > 3 ? 3 : 0] = v.w;
        } else {
          q[u][r][0] = src[0];
        }
        sc[u][r] = bf(m.s[size_t(row) * gpr + g]);
        bi[u][r] = bf(m.b[size_t(row) * gpr + g]);
      }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int ci = c0 + 32 * u;
      if (ci >= chunks) break;
      typename W::X xv[C];
      float xsum = 0;
#pragma unroll
      for (int k = 0; k < C; ++k) xv[k] = xq[ci * C + k], xsum += xs[ci * C + k];
      const float d = dx[ci * C * 8 / kGroup];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        int dot = 0;
#pragma unroll
        for (int k = 0; k < C; ++k) dot = W::dot(q[u][r][k], xv[k], dot);
        acc[r] += sc[u][r] * d * float(dot) + bi[u][r] * xsum;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < m.rows) y[row0 + r] = v;
  }
}

// M: the fp32-exact GEMV on the tensor cores. x (scaled by 2^-E into [-1, 1]) is the sum of three halves,
// x' = h0 + 2^-11 h1 + 2^-22 h2 (33 bits: fp32's 24 and room for elements far below the largest), and a
// 4-bit weight is exact in half; mma.sync m16n8k16 takes 16 rows x 16 columns of weights as A and the
// pieces as three of B's 8 columns, its products exact (4 x 11 bits) and summed in fp32. Per group of 64
// columns the four k blocks go into a fresh accumulator, which the group's scale then weights in fp32:
// y = 2^E Σ_g s_g (D0 + 2^-11 D1 + 2^-22 D2) + Σ_g b_g Σx_g. A warp takes 16·T rows; lane (g = l/4,
// t = l%4) loads 8 bytes (columns 16t .. 16t+15 of the group) of rows g and g+8 of each tile, and
// block b's A registers are nibbles (b, b+4) of its two words: logical k (2t, 2t+1) is column
// (16t + b, 16t + b + 4), k (2t+8, 2t+9) column (16t + 8 + b, 16t + 12 + b). The pieces are stored in
// that order per (group, block, lane): B's registers for column n = l/4 (piece n; zero from 3).
__device__ __forceinline__ uint32_t nibble_pair_half2(uint32_t w, int b) {
  const uint32_t v = ((w >> (4 * b)) & 0x000F000Fu) | 0x64006400u;  // (1024 + n_b, 1024 + n_(b+4))
  const __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&v), __half2half2(__ushort_as_half(0x6400u)));
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <int T>
__global__ void gemv_m(Mat m, const uint2* xp, const float* xsum, float scale_e, float* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int row0 = (blockIdx.x * (blockDim.x / 32) + warp) * 16 * T;
  if (row0 >= m.rows) return;
  const int rb = m.cols / 2, gpr = m.cols / kGroup;
  float acc[T][2][2] = {}, bias_acc[T][2] = {};  // [tile][row g, g+8][this lane's two pieces]
  int rows[T][2];
#pragma unroll
  for (int i = 0; i < T; ++i) rows[i][0] = min(row0 + 16 * i + g, m.rows - 1), rows[i][1] = min(row0 + 16 * i + g + 8, m.rows - 1);
  for (int gi = 0; gi < gpr; ++gi) {
    uint2 w[T][2];
#pragma unroll
    for (int i = 0; i < T; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) w[i][h] = *reinterpret_cast<const uint2*>(m.w + size_t(rows[i][h]) * rb + gi * 32 + 8 * t);
    uint2 b[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) b[k] = xp[(gi * 4 + k) * 32 + lane];
    float sc[T][2], bi[T][2];
#pragma unroll
    for (int i = 0; i < T; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) sc[i][h] = bf(m.s[size_t(rows[i][h]) * gpr + gi]), bi[i][h] = bf(m.b[size_t(rows[i][h]) * gpr + gi]);
    const float xs = xsum[gi];
#pragma unroll
    for (int i = 0; i < T; ++i) {
      float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t a0 = nibble_pair_half2(w[i][0].x, k), a1 = nibble_pair_half2(w[i][1].x, k);
        const uint32_t a2 = nibble_pair_half2(w[i][0].y, k), a3 = nibble_pair_half2(w[i][1].y, k);
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[k].x), "r"(b[k].y));
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        acc[i][h][0] += sc[i][h] * d[2 * h];
        acc[i][h][1] += sc[i][h] * d[2 * h + 1];
        bias_acc[i][h] += bi[i][h] * xs;
      }
    }
  }
  // Lane t holds pieces 2t and 2t + 1 (t = 0: h0, h1; t = 1: h2): joined by two shuffles.
#pragma unroll
  for (int i = 0; i < T; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float hi = acc[i][h][0] + acc[i][h][1] * (1.0f / 2048.0f);
      const float lo = __shfl_down_sync(0xffffffffu, acc[i][h][0], 1) * (1.0f / 4194304.0f);
      if (t == 0 && row0 + 16 * i + g + 8 * h < m.rows)
        y[row0 + 16 * i + g + 8 * h] = scale_e * (hi + lo) + bias_acc[i][h];
    }
}

// The pieces of x for gemv_m, in its register order, and each group's Σx.
void x_pieces(const std::vector<float>& x, std::vector<uint2>& xp, std::vector<float>& xsum, float& scale_e) {
  float mx = 0;
  for (float v : x) mx = std::max(mx, std::fabs(v));
  const int e = mx > 0 ? int(std::ceil(std::log2(mx))) : 0;
  scale_e = std::ldexp(1.0f, e);
  const int groups = int(x.size()) / kGroup;
  std::vector<__half> h[3];
  for (auto& v : h) v.resize(x.size());
  for (size_t c = 0; c < x.size(); ++c) {
    const float xp0 = std::ldexp(x[c], -e);
    h[0][c] = __float2half_rn(xp0);
    const float r1 = xp0 - __half2float(h[0][c]);
    h[1][c] = __float2half_rn(r1 * 2048.0f);
    const float r2 = r1 - __half2float(h[1][c]) / 2048.0f;
    h[2][c] = __float2half_rn(r2 * 4194304.0f);
  }
  xp.assign(size_t(groups) * 4 * 32, uint2{0, 0});
  xsum.assign(groups, 0.f);
  auto pack = [](__half a, __half b) { return uint32_t(__half_as_ushort(a)) | (uint32_t(__half_as_ushort(b)) << 16); };
  for (int gi = 0; gi < groups; ++gi) {
    for (int i = 0; i < kGroup; ++i) xsum[gi] += x[size_t(gi) * kGroup + i];
    for (int k = 0; k < 4; ++k)
      for (int lane = 0; lane < 32; ++lane) {
        const int n = lane / 4, t = lane % 4;
        if (n >= 3) continue;
        const size_t c = size_t(gi) * kGroup + 16 * t;
        xp[(gi * 4 + k) * 32 + lane] = {pack(h[n][c + k], h[n][c + k + 4]), pack(h[n][c + 8 + k], h[n][c + 12 + k])};
      }
  }
}

// x quantised per group of kGroup columns to integers T within ±qmax (dx: each group's step), each word's
// 8 columns stored as its even columns 0, 2, 4, 6, then its odd ones (the order the variants multiply in).
template <class T>
void quantise_groups(const std::vector<float>& x, float qmax, std::vector<T>& q, std::vector<float>& dx) {
  q.assign(x.size(), 0);
  dx.assign(x.size() / kGroup, 0.f);
  for (size_t g = 0; g < dx.size(); ++g) {
    float mx = 0;
    for (int i = 0; i < kGroup; ++i) mx = std::max(mx, std::fabs(x[g * kGroup + i]));
    dx[g] = mx / qmax;
    for (int i = 0; i < kGroup; ++i) {
      const size_t c = g * kGroup + i, w = c / 8, j = c % 8;
      q[8 * w + (j % 2) * 4 + j / 2] = T(std::nearbyint(x[c] / dx[g]));
    }
  }
}

int main() {
  const Shape shapes[] = {{"deltanet in-proj 12352x2048", 12352, 2048},
                          {"out-proj 2048x4096", 2048, 4096},
                          {"shared down 2048x512", 2048, 512},
                          {"lm_head 248320x2048", 248320, 2048}};
  std::mt19937 rng(7);
  for (const Shape& sh : shapes) {
    const size_t wb = size_t(sh.rows) * sh.cols / 2, sb = size_t(sh.rows) * (sh.cols / kGroup) * 2;
    const int copies = int(std::max<size_t>(1, (size_t(400) << 20) / (wb + 2 * sb)));  // > 8x the L2
    std::vector<uint8_t> hw(wb);
    for (auto& v : hw) v = uint8_t(rng());
    std::vector<uint16_t> hs(sb / 2), hb(sb / 2);
    for (size_t i = 0; i < hs.size(); ++i) {
      const float s = 0.01f * (1 + (rng() % 100) / 100.f), b = -7.5f * s;
      uint32_t u;
      std::memcpy(&u, &s, 4), hs[i] = uint16_t(u >> 16);
      std::memcpy(&u, &b, 4), hb[i] = uint16_t(u >> 16);
    }
    std::vector<float> hx(sh.cols);
    for (auto& v : hx) v = std::normal_distribution<float>()(rng);
    std::vector<Mat> mats(copies);
    for (int c = 0; c < copies; ++c) {
      uint8_t* w;
      uint16_t *s, *b;
      CHECK(cudaMalloc(&w, wb));
      CHECK(cudaMalloc(&s, sb));
      CHECK(cudaMalloc(&b, sb));
      CHECK(cudaMemcpy(w, hw.data(), wb, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(s, hs.data(), sb, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(b, hb.data(), sb, cudaMemcpyHostToDevice));
      mats[c] = {w, s, b, sh.rows, sh.cols};
    }
    float *x, *y;
    CHECK(cudaMalloc(&x, sh.cols * 4));
    CHECK(cudaMalloc(&y, size_t(sh.rows) * 4));
    CHECK(cudaMemcpy(x, hx.data(), sh.cols * 4, cudaMemcpyHostToDevice));
    // The same in int16: per word [x0|x2] [x4|x6] [x1|x3] [x5|x7].
    std::vector<int16_t> hq16;
    std::vector<float> hdx16;
    quantise_groups(hx, 32767.f, hq16, hdx16);
    uint4* dq16;
    float* ddx16;
    CHECK(cudaMalloc(&dq16, sh.cols * 2));
    CHECK(cudaMalloc(&ddx16, hdx16.size() * 4));
    CHECK(cudaMemcpy(dq16, hq16.data(), sh.cols * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(ddx16, hdx16.data(), hdx16.size() * 4, cudaMemcpyHostToDevice));
    std::vector<float> ref(sh.rows), got(sh.rows);
    std::printf("%s: %.1f MB per matrix, %d copies\n", sh.name, (wb + 2 * sb) / 1e6, copies);
    // x in int8 per group of 64, each word's even columns then its odd ones; dx per group, Σx per word.
    std::vector<int8_t> hq;
    std::vector<float> hdx, hxs(sh.cols / 8);
    quantise_groups(hx, 127.f, hq, hdx);
    for (int w = 0; w < sh.cols / 8; ++w) {
      float t = 0;
      for (int j = 0; j < 8; ++j) t += hx[8 * w + j];
      hxs[w] = t;
    }
    uint2* dq;
    float *ddx, *dxs;
    CHECK(cudaMalloc(&dq, sh.cols));
    CHECK(cudaMalloc(&ddx, hdx.size() * 4));
    CHECK(cudaMalloc(&dxs, hxs.size() * 4));
    CHECK(cudaMemcpy(dq, hq.data(), sh.cols, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(ddx, hdx.data(), hdx.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dxs, hxs.data(), hxs.size() * 4, cudaMemcpyHostToDevice));

    auto bench = [&](const char* name, auto launch) {
      launch(mats[0]);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(got.data(), y, size_t(sh.rows) * 4, cudaMemcpyDeviceToHost));
      if (name[0] == 'A') ref = got;
      double err = 0, scale = 0;
      for (int i = 0; i < sh.rows; ++i) err = std::max(err, double(std::fabs(got[i] - ref[i]))), scale = std::max(scale, double(std::fabs(ref[i])));
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      const int reps = 60;
      cudaEventRecord(a);
      for (int i = 0; i < reps; ++i) launch(mats[i % copies]);
      cudaEventRecord(b);
      CHECK(cudaEventSynchronize(b));
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      const double us = 1e3 * ms / reps;
      // The same matrix every time: read from the L2 where it fits (50 MB), so what is left is the kernel's
      // own work and latency, not HBM's.
      cudaEventRecord(a);
      for (int i = 0; i < reps; ++i) launch(mats[0]);
      cudaEventRecord(b);
      CHECK(cudaEventSynchronize(b));
      cudaEventElapsedTime(&ms, a, b);
      const double warm = 1e3 * ms / reps;
      std::printf("  %-28s %8.2f us  %7.0f GB/s  max err %.1e  | one copy: %8.2f us\n", name, us, (wb + 2 * sb) / us / 1e3,
                  err / scale, warm);
    };
    const int M = sh.rows;
    bench("A warp/row uint4", [&](Mat m) { gemv_a<<<(M + 3) / 4, 128>>>(m, x, y); });
    bench("B R=1 U=1", [&](Mat m) { gemv_b<1, 1><<<(M + 3) / 4, 128>>>(m, x, y); });
    bench("B R=4 U=1 (64 thr)", [&](Mat m) { gemv_b<4, 1><<<(M + 7) / 8, 64>>>(m, x, y); });
    bench("B R=4 U=2", [&](Mat m) { gemv_b<4, 2><<<(M + 15) / 16, 128>>>(m, x, y); });
    if (sh.cols >= 2048) bench("B R=2 U=4", [&](Mat m) { gemv_b<2, 4><<<(M + 7) / 8, 128>>>(m, x, y); });
    bench("B R=2 U=2 (rows_dot)", [&](Mat m) { gemv_b<2, 2><<<(M + 7) / 8, 128>>>(m, x, y); });
    if (sh.cols >= 2048) bench("B R=4 U=4", [&](Mat m) { gemv_b<4, 4><<<(M + 15) / 16, 128>>>(m, x, y); });
    bench("B R=8 U=1", [&](Mat m) { gemv_b<8, 1><<<(M + 31) / 32, 128>>>(m, x, y); });
    bench("D block/row 128 thr", [&](Mat m) { gemv_d<<<M, 128>>>(m, x, y); });
    const size_t shm = size_t(sh.cols) * 4;
    bench("E R=1 smem-x", [&](Mat m) { gemv_e<1><<<(M + 3) / 4, 128, shm>>>(m, x, y); });
    bench("E R=2 smem-x", [&](Mat m) { gemv_e<2><<<(M + 7) / 8, 128, shm>>>(m, x, y); });
    bench("E R=4 smem-x", [&](Mat m) { gemv_e<4><<<(M + 15) / 16, 128, shm>>>(m, x, y); });
    bench("E R=4 smem-x 256 thr", [&](Mat m) { gemv_e<4><<<(M + 31) / 32, 256, shm>>>(m, x, y); });
    bench("G R=1 chunk in place", [&](Mat m) { gemv_g<1><<<(M + 3) / 4, 128>>>(m, x, y); });
    bench("G R=2 chunk in place", [&](Mat m) { gemv_g<2><<<(M + 7) / 8, 128>>>(m, x, y); });
    bench("G R=4 chunk in place", [&](Mat m) { gemv_g<4><<<(M + 15) / 16, 128>>>(m, x, y); });
    bench("G R=2 chunk 256 thr", [&](Mat m) { gemv_g<2><<<(M + 15) / 16, 256>>>(m, x, y); });
    bench("H R=2 U=2 half2", [&](Mat m) { gemv_h<2, 2><<<(M + 7) / 8, 128>>>(m, x, y); });
    if (sh.cols >= 2048) bench("H R=2 U=4 half2", [&](Mat m) { gemv_h<2, 4><<<(M + 7) / 8, 128>>>(m, x, y); });
    bench("H R=4 U=2 half2", [&](Mat m) { gemv_h<4, 2><<<(M + 15) / 16, 128>>>(m, x, y); });
    bench("I R=1 chunk half2", [&](Mat m) { gemv_i<1><<<(M + 3) / 4, 128>>>(m, x, y); });
    bench("I R=2 chunk half2", [&](Mat m) { gemv_i<2><<<(M + 7) / 8, 128>>>(m, x, y); });
    bench("I R=4 chunk half2", [&](Mat m) { gemv_i<4><<<(M + 15) / 16, 128>>>(m, x, y); });
    bench("Q R=2 word int8", [&](Mat m) { gemv_int<Int8Words, 2, 1><<<(M + 7) / 8, 128>>>(m, dq, ddx, dxs, y); });
    bench("Q R=4 word int8", [&](Mat m) { gemv_int<Int8Words, 4, 1><<<(M + 15) / 16, 128>>>(m, dq, ddx, dxs, y); });
    bench("Q R=2 chunk int8", [&](Mat m) { gemv_int<Int8Words, 2, 4><<<(M + 7) / 8, 128>>>(m, dq, ddx, dxs, y); });
    bench("Q R=4 chunk int8", [&](Mat m) { gemv_int<Int8Words, 4, 4><<<(M + 15) / 16, 128>>>(m, dq, ddx, dxs, y); });
    bench("Q R=1 chunk int8", [&](Mat m) { gemv_int<Int8Words, 1, 4><<<(M + 3) / 4, 128>>>(m, dq, ddx, dxs, y); });
    bench("P R=2 word int16", [&](Mat m) { gemv_int<Int16Words, 2, 1><<<(M + 7) / 8, 128>>>(m, dq16, ddx16, dxs, y); });
    bench("P R=4 word int16", [&](Mat m) { gemv_int<Int16Words, 4, 1><<<(M + 15) / 16, 128>>>(m, dq16, ddx16, dxs, y); });
    bench("P R=2 chunk int16", [&](Mat m) { gemv_int<Int16Words, 2, 4><<<(M + 7) / 8, 128>>>(m, dq16, ddx16, dxs, y); });
    bench("P R=4 chunk int16", [&](Mat m) { gemv_int<Int16Words, 4, 4><<<(M + 15) / 16, 128>>>(m, dq16, ddx16, dxs, y); });
    bench("P R=1 chunk int16", [&](Mat m) { gemv_int<Int16Words, 1, 4><<<(M + 3) / 4, 128>>>(m, dq16, ddx16, dxs, y); });
    // M: exact on the tensor cores (x in three half pieces).
    std::vector<uint2> hxp;
    std::vector<float> hxsum;
    float scale_e = 1.0f;
    x_pieces(hx, hxp, hxsum, scale_e);
    uint2* dxp;
    float* dxsum;
    CHECK(cudaMalloc(&dxp, hxp.size() * sizeof(uint2)));
    CHECK(cudaMalloc(&dxsum, hxsum.size() * 4));
    CHECK(cudaMemcpy(dxp, hxp.data(), hxp.size() * sizeof(uint2), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dxsum, hxsum.data(), hxsum.size() * 4, cudaMemcpyHostToDevice));
    bench("M T=1 mma exact", [&](Mat m) { gemv_m<1><<<(M + 63) / 64, 128>>>(m, dxp, dxsum, scale_e, y); });
    bench("M T=2 mma exact", [&](Mat m) { gemv_m<2><<<(M + 127) / 128, 128>>>(m, dxp, dxsum, scale_e, y); });
    bench("M T=2 mma exact 256 thr", [&](Mat m) { gemv_m<2><<<(M + 255) / 256, 256>>>(m, dxp, dxsum, scale_e, y); });
    bench("M T=4 mma exact", [&](Mat m) { gemv_m<4><<<(M + 255) / 256, 128>>>(m, dxp, dxsum, scale_e, y); });
    cudaFree(dxp), cudaFree(dxsum);
    for (Mat& m : mats) cudaFree(const_cast<uint8_t*>(m.w)), cudaFree(const_cast<uint16_t*>(m.s)), cudaFree(const_cast<uint16_t*>(m.b));
    cudaFree(x);
    cudaFree(dq), cudaFree(ddx), cudaFree(dxs), cudaFree(dq16), cudaFree(ddx16);
    cudaFree(y);
  }
  return 0;
}
