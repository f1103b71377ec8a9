// Helpers shared by the kernels: scalar decoding of stored weights and the fused dequantising dot
// product (fp32 accumulation) that every GEMV-class kernel uses.
#ifndef MOELENS_SHADER_COMMON_H
#define MOELENS_SHADER_COMMON_H

#include "params.h"

inline float bf16_bits_to_float(ushort bits) { return as_type<float>(uint(bits) << 16); }
inline float f16_bits_to_float(ushort bits) { return float(as_type<half>(bits)); }

inline float silu(float x) { return x / (1.0f + exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// Element i of a scale or bias array stored as bf16, f16 or f32.
inline float load_scale(device const uchar* base, ulong i, uint type) {
  if (type == SCALE_F32) return ((device const float*)base)[i];
  ushort bits = ((device const ushort*)base)[i];
  return type == SCALE_BF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
}

// Element i of a dense row stored as bf16, f16 or f32 (embedding rows).
inline float load_dense(device const uchar* row, uint i, uint format) {
  if (format == WEIGHT_F32) return ((device const float*)row)[i];
  ushort bits = ((device const ushort*)row)[i];
  return format == WEIGHT_BF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
}

// q as a float without an int-to-float conversion (those are quarter rate on NVIDIA GPUs): the bits
// 0x4B000000 | q are the float 2^23 + q, exactly, for q < 2^23.
inline float unpack(uint word, uint shift, uint mask) {
  return as_type<float>(((word >> shift) & mask) | 0x4B000000u) - 8388608.0f;
}

// x[col .. col+3] (col a multiple of 4), in one 16-byte load when x is 16-byte aligned (`vec`).
inline void load_x4(device const float* x, uint col, bool vec, thread float& a, thread float& b, thread float& c,
                    thread float& d) {
  if (vec) {
    const float4 v = ((device const float4*)x)[col / 4u];
    a = v.x;
    b = v.y;
    c = v.z;
    d = v.w;
  } else {
    a = x[col];
    b = x[col + 1u];
    c = x[col + 2u];
    d = x[col + 3u];
  }
}

// Σ w·x over the 16-byte chunk c of one row (32 4-bit, 16 8-bit, 8 16-bit or 4 32-bit weights). A
// quantized chunk lies inside one group (group sizes are multiples of 32), so it costs
// scale·Σq·x + bias·Σx, as MLX's qdot does.
inline float chunk_dot(constant WeightDesc& w, device const uchar* row, device const uchar* scales,
                       device const uchar* biases, uint c, device const float* x, bool vec) {
  const uint4 q = ((device const uint4*)row)[c];
  const uint words[4] = {q.x, q.y, q.z, q.w};
  float a, b, cc, d;
  if (w.format == WEIGHT_Q4) {
    const uint col0 = c * 32u;
    float qx = 0.0f, xs = 0.0f;
    for (uint k = 0; k < 4u; ++k) {
      for (uint h = 0; h < 2u; ++h) {
        load_x4(x, col0 + 8u * k + 4u * h, vec, a, b, cc, d);
        const uint s = 16u * h;
        qx += unpack(words[k], s, 15u) * a + unpack(words[k], s + 4u, 15u) * b + unpack(words[k], s + 8u, 15u) * cc +
              unpack(words[k], s + 12u, 15u) * d;
        xs += (a + b) + (cc + d);
      }
    }
    const uint g = col0 / w.group_size;
    return load_scale(scales, g, w.scale_type) * qx + load_scale(biases, g, w.scale_type) * xs;
  }
  if (w.format == WEIGHT_Q8) {
    const uint col0 = c * 16u;
    float qx = 0.0f, xs = 0.0f;
    for (uint k = 0; k < 4u; ++k) {
      load_x4(x, col0 + 4u * k, vec, a, b, cc, d);
      qx += unpack(words[k], 0u, 255u) * a + unpack(words[k], 8u, 255u) * b + unpack(words[k], 16u, 255u) * cc +
            unpack(words[k], 24u, 255u) * d;
      xs += (a + b) + (cc + d);
    }
    const uint g = col0 / w.group_size;
    return load_scale(scales, g, w.scale_type) * qx + load_scale(biases, g, w.scale_type) * xs;
  }
  float acc = 0.0f;
  if (w.format == WEIGHT_F32) {
    load_x4(x, c * 4u, vec, a, b, cc, d);
    return as_type<float>(words[0]) * a + as_type<float>(words[1]) * b + as_type<float>(words[2]) * cc +
           as_type<float>(words[3]) * d;
  }
  const bool bf = w.format == WEIGHT_BF16;
  for (uint k = 0; k < 4u; k += 2u) {
    load_x4(x, c * 8u + 2u * k, vec, a, b, cc, d);
    const ushort h0 = ushort(words[k] & 0xffffu), h1 = ushort(words[k] >> 16);
    const ushort h2 = ushort(words[k + 1u] & 0xffffu), h3 = ushort(words[k + 1u] >> 16);
    acc += (bf ? bf16_bits_to_float(h0) : f16_bits_to_float(h0)) * a + (bf ? bf16_bits_to_float(h1) : f16_bits_to_float(h1)) * b +
           (bf ? bf16_bits_to_float(h2) : f16_bits_to_float(h2)) * cc + (bf ? bf16_bits_to_float(h3) : f16_bits_to_float(h3)) * d;
  }
  return acc;
}

// W[row] · x over a whole row by the 32 lanes of one simdgroup; every lane gets the sum.
// `data`, `scales` and `biases` point at the matrix (expert) the row belongs to; `vec`: x is 16-byte aligned.
inline float row_dot(constant WeightDesc& w, device const uchar* data, device const uchar* scales,
                     device const uchar* biases, ulong row, device const float* x, bool vec, uint lane) {
  device const uchar* r = data + row * ulong(w.row_bytes);
  device const uchar* s = scales + row * ulong(w.scale_row_bytes);
  device const uchar* b = biases + row * ulong(w.scale_row_bytes);
  const uint chunks = w.row_bytes / 16u;
  float acc = 0.0f;
  for (uint c = lane; c < chunks; c += 32u) acc += chunk_dot(w, r, s, b, c, x, vec);
  return simd_sum(acc);
}

// Byte offset of expert e in a stack.
inline ulong expert_bytes(constant WeightDesc& w, uint e) { return ulong(e) * ulong(w.rows) * ulong(w.row_bytes); }
inline ulong expert_scale_bytes(constant WeightDesc& w, uint e) {
  return ulong(e) * ulong(w.rows) * ulong(w.scale_row_bytes);
}

// Sum of v over the threadgroup (threads = a multiple of 32, at most 1024), through `scratch` (32
// floats of threadgroup memory). Every thread gets the total. Begins and ends with a barrier so that
// `scratch` can be reused at once.
inline float threadgroup_sum(float v, threadgroup float* scratch, uint sg, uint lane, uint simdgroups) {
  float s = simd_sum(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) scratch[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0.0f;
  for (uint i = 0; i < simdgroups; ++i) total += scratch[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

inline float threadgroup_max(float v, threadgroup float* scratch, uint sg, uint lane, uint simdgroups) {
  float s = simd_max(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) scratch[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = scratch[0];
  for (uint i = 1; i < simdgroups; ++i) total = max(total, scratch[i]);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

#endif
