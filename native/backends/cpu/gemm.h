// Dense fp32 tile kernels for prefill: y[t, r] = Σ_k w[r, k] · x[t, k] for a tile of dequantised weight
// rows and many activation rows. The tokens are packed 16 to a vector (k-major), so each weight value is
// broadcast once against 16 tokens and the sums need no horizontal reduction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dot.h"

namespace moelens::cpu {

constexpr int kGemmTokens = 16;  // tokens per packed block (one 512-bit vector of fp32)
constexpr int kGemmRows = 8;     // weight rows per tile

// n activation rows of `cols` floats, packed as blocks of kGemmTokens tokens: block b holds
// x[b·16 + j][k] at data[(b·cols + k)·16 + j], zero for tokens past n.
struct PackedTokens {
  int n = 0;
  int64_t cols = 0;
  bool reordered = false;  // columns in the 4-bit kernels' order
  std::vector<float> data;
  bool fits(const LinearWeight& w) const { return cols == w.cols && reordered == uses_reordered_columns(w); }
  int blocks() const { return (n + kGemmTokens - 1) / kGemmTokens; }
  const float* block(int b) const { return data.data() + size_t(b) * size_t(cols) * kGemmTokens; }
};

// Packs rows x (stride cols); with `reorder`, each row in the 4-bit kernels' column order (reorder_columns).
void pack_tokens(const float* x, int n, int64_t cols, bool reorder, PackedTokens* out);

// w: kGemmRows rows of cols floats (rows past `rows` are read but their results dropped); y: element
// (t, r0 + r) at y[t * ldy + r0 + r], written for r < rows and every token.
void gemm_tile(const float* w, int rows, const PackedTokens& x, float* y, int64_t ldy, int64_t r0);

}  // namespace moelens::cpu
