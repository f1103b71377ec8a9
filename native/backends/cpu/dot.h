// Row kernels for the CPU backend: dot products of one stored weight row (dense F32/F16/BF16, or MLX
// affine 4/8-bit) with fp32 activations, and row dequantisation. SIMD (AVX2/AVX-512 on x86-64, NEON on
// arm64) with a scalar fallback; every path accumulates in fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../core/weights.h"

namespace moelens::cpu {

// A row of a LinearWeight, resolved to raw pointers.
struct Row {
  const uint8_t* data;
  const uint8_t* scales;  // quantized only
  const uint8_t* biases;
};

inline Row row_of(const LinearWeight& w, int64_t expert, int64_t r) {
  Row row{w.data[size_t(expert)] + size_t(r) * w.row_bytes(), nullptr, nullptr};
  if (w.quantized()) {
    row.scales = w.scales[size_t(expert)] + size_t(r) * w.scale_row_bytes();
    row.biases = w.biases[size_t(expert)] + size_t(r) * w.scale_row_bytes();
  }
  return row;
}

// Σ_i w[i]·x[i] over the row. For quantized rows `group_sums` holds Σ x over each group
// (see group_sums()), so that each group costs s·Σ q·x + b·Σ x as in MLX's qdot.
float dot_row(const LinearWeight& w, const Row& row, const float* x, const float* group_sums);

// Σ x over each group of `group_size` columns.
void group_sums(const float* x, int64_t cols, int group_size, float* out);

// Writes the row as fp32.
void dequantize_row(const LinearWeight& w, const Row& row, float* out);

float dot_f32(const float* a, const float* b, int64_t n);
// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);

}  // namespace moelens::cpu
