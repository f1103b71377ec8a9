// Elementwise kernels over fp32 activations (raw 32-bit copies, conversions to and from half), plus the
// embedding gather.
// One thread per element, ELEMENTWISE_THREADS per threadgroup.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// a += scale * b
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void add_scaled(device float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                       constant ElementwiseParams& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i < p.count) a[i] += p.scale * b[i];
}

// x *= scale
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void scale_values(device float* x [[buffer(0)]], constant ElementwiseParams& p [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) {
  if (i < p.count) x[i] *= p.scale;
}

// dst = a 32-bit pattern (a float or an int)
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void fill_words(device uint* dst [[buffer(0)]], constant ElementwiseParams& p [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
  if (i < p.count) dst[i] = p.value;
}

// dst = src, 32-bit words (the host refuses overlapping ranges)
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void copy_words(device uint* dst [[buffer(0)]], device const uint* src [[buffer(1)]],
                       constant ElementwiseParams& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i < p.count) dst[i] = src[i];
}

// dst = src rounded to half (an fp32 buffer into an F16 one: KV cache rows)
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void copy_to_half(device half* dst [[buffer(0)]], device const float* src [[buffer(1)]],
                         constant ElementwiseParams& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i < p.count) dst[i] = half(src[i]);
}

// dst = src widened to fp32 (an F16 buffer into an fp32 one)
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void copy_from_half(device float* dst [[buffer(0)]], device const half* src [[buffer(1)]],
                           constant ElementwiseParams& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i < p.count) dst[i] = float(src[i]);
}

// out[t, c] = table[ids[t], c], dequantized; grid (columns / threads, tokens)
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void embed(device const uchar* data [[buffer(0)]], device const uchar* scales [[buffer(1)]],
                  device const uchar* biases [[buffer(2)]], device const int* ids [[buffer(3)]],
                  device float* out [[buffer(4)]], constant EmbedParams& p [[buffer(5)]],
                  uint2 pos [[thread_position_in_grid]]) {
  const uint c = pos.x, t = pos.y;
  if (c >= p.w.cols || t >= p.n) return;
  const ulong row = ulong(ids[t]);
  device const uchar* r = data + row * ulong(p.w.row_bytes);
  float v;
  if (p.w.format == WEIGHT_Q4 || p.w.format == WEIGHT_Q8) {
    const uint bits = p.w.format, per_word = 32u / bits;
    const uint word = ((device const uint*)r)[c / per_word];
    const float q = float((word >> (bits * (c % per_word))) & ((1u << bits) - 1u));
    const ulong at = row * ulong(p.w.scale_row_bytes);
    const uint g = c / p.w.group_size;
    v = load_scale(scales + at, g, p.w.scale_type) * q + load_scale(biases + at, g, p.w.scale_type);
  } else {
    v = load_dense(r, c, p.w.format);
  }
  out[ulong(t) * p.w.cols + c] = v;
}
