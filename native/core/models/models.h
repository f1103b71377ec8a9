// The model plans, by architecture (config.json's model_type).
#pragma once

#include <memory>

#include "../config.h"
#include "../plan.h"

namespace moelens {

std::unique_ptr<ModelPlan> make_plan(const ModelConfig& c);

// One per file of this folder.
std::unique_ptr<ModelPlan> make_qwen3_5_moe_plan(const ModelConfig& c);
std::unique_ptr<ModelPlan> make_qwen3_5_plan(const ModelConfig& c);

}  // namespace moelens
