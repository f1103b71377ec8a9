#include "models.h"

#include "../error.h"

namespace moelens {

std::unique_ptr<ModelPlan> make_plan(const ModelConfig& c) {
  if (c.model_type == "qwen3_5_moe" || c.model_type == "qwen3_5_moe_text") return make_qwen3_5_moe_plan(c);
  if (c.model_type == "qwen3_5" || c.model_type == "qwen3_5_text") return make_qwen3_5_plan(c);
  fail("no model plan for model_type '", c.model_type, "'");
}

}  // namespace moelens
