// The activation functions of the CPU backend, written as the reference math (model-reference.md).
#pragma once

#include <cmath>

namespace moelens::cpu {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace moelens::cpu
