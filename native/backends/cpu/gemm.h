// Dense fp32 tile kernels for prefill: y[t, r] = Σ_k w[r, k] · x[t, k] over a block of dequantised
// weight rows and many activation rows, register-blocked so that each loaded vector feeds several FMAs.
#pragma once

#include <cstdint>

namespace moelens::cpu {

// w: `rows` rows of `cols` floats (stride cols); x: n rows (stride cols); y: element (t, r0 + r) at
// y[t * ldy + r0 + r]. rows <= 4.
void gemm_tile(const float* w, int rows, const float* x, int n, int64_t cols, float* y, int64_t ldy, int64_t r0);

}  // namespace moelens::cpu
