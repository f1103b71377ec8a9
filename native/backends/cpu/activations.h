// The activation functions of the CPU backend, written as the reference math (docs/model.md).
#pragma once

#include <cmath>
#include <cstdint>

namespace moelens::cpu {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// x[i] = silu(x[i]) for an array. With AVX-512, 16 at a time with a polynomial e^-x within a few ulp of
// expf (decode evaluates about 550 000 of them per token, which cost 2 ms of scalar expf); elsewhere,
// and for the last n mod 16, silu above.
void silu_inplace(float* x, int64_t n);

}  // namespace moelens::cpu
