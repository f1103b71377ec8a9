// The logit lens: the model's final norm and lm_head applied to any residual-stream rows.
#pragma once

#include <vector>

#include "model.h"

namespace moelens {

// logits [n, vocab] for rows x [n, hidden]; `apply_norm` applies the final RMSNorm first (the lens).
std::vector<float> unembed(const Model& model, const float* x, int n, bool apply_norm);

}  // namespace moelens
