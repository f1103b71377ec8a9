// Row kernels for the CPU backend: dot products of one stored weight row (dense F32/F16/BF16, or MLX
// affine 4/8-bit) with fp32 activations, and row dequantisation. SIMD (AVX2/AVX-512 on x86-64, NEON on
// arm64) with a scalar fallback; every path accumulates in fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

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

// One activation row prepared for dot_row against the rows of one weight: Σ x over each quantization
// group (each group then costs s·Σ q·x + b·Σ x, as in MLX's qdot), and the column order the SIMD
// kernel wants (for 4-bit on AVX-512: even then odd columns per block of 64).
struct PreparedInput {
  const float* x = nullptr;   // the activations as given
  const float* xq = nullptr;  // what the quantized kernel reads: x, or `reordered`
  std::vector<float> gsum, reordered;
};
void prepare_input(const LinearWeight& w, const float* x, PreparedInput* out);

// Σ_i w[i]·x[i] over the row.
float dot_row(const LinearWeight& w, const Row& row, const PreparedInput& in);

// out[t] = row · in[t] for a few tokens (at most kRowTokens), the row unpacked once for all of them. It beats
// the prefill tiles (dequantise, then broadcast) when a matrix sees so few tokens, as an expert does in a
// short prompt; has_token_row_kernel says whether `w` has such a kernel (else it is a loop over dot_row).
constexpr int kRowTokens = 8;
bool has_token_row_kernel(const LinearWeight& w);
void dot_row_tokens(const LinearWeight& w, const Row& row, const PreparedInput* in, int tokens, float* out);

// Σ_j weights[j] · (rows[j] · in[j]): rows of several experts against their own activations, summed with
// one horizontal sum (the MoE down projection of one token).
float dot_rows_weighted(const LinearWeight& w, const Row* rows, const PreparedInput* in, const float* weights, int count);

// Writes the row as fp32.
void dequantize_row(const LinearWeight& w, const Row& row, float* out);

// The column order the SIMD kernels use for `w`. For 4-bit on AVX-512 (group size 32, 64 or 128, columns a
// multiple of 64): in each chunk of 128 columns (or a last one of 64), position k·(width/8) + i holds
// column 8i + k, the order in which shifting the packed words exposes the nibbles. Rows of activations in
// that order come from reorder_columns, and dequantize_row_reordered writes weight rows in it, so their
// dot products are unchanged.
bool uses_reordered_columns(const LinearWeight& w);
void reorder_columns(const float* x, int64_t cols, float* out);
void dequantize_row_reordered(const LinearWeight& w, const Row& row, float* out);

float dot_f32(const float* a, const float* b, int64_t n);
// out[0, dim) = Σ_j weights[j] · rows[j·stride + (0, dim)] (attention's probabilities times values), summed in
// registers rather than through out.
void weighted_rows_sum(const float* weights, const float* rows, int64_t stride, int count, int64_t dim, float* out);
// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);

}  // namespace moelens::cpu
