// qwen3_5 (Qwen3.5 dense): the hybrid layers of qwen3_5_moe with a dense SwiGLU MLP in place of the
// mixture of experts. The MLP runs through the expert kernel as one expert of weight 1, so every
// backend runs it without a kernel of its own.
#include "hybrid_plan.h"
#include "models.h"

namespace moelens {

namespace {

struct MlpScratch : MixerScratch {
  std::unique_ptr<Buffer> one_expert, unit_weight, out;

  MlpScratch(Backend& be, const ModelConfig& c, int m) : MixerScratch(be, c, m) {
    one_expert = be.alloc(ElemType::I32, size_t(m));  // zero-filled: expert 0
    unit_weight = alloc(be, m, 1);
    be.fill(unit_weight, 1.0f, size_t(m));
    out = alloc(be, m, c.hidden_size);
  }
  size_t elements() const override {
    return MixerScratch::elements() + one_expert->count() + unit_weight->count() + out->count();
  }
};

class Qwen35Plan : public HybridPlan {
 public:
  explicit Qwen35Plan(const ModelConfig& c) : HybridPlan(c, FeedForward::Mlp) {}

  std::unique_ptr<PlanScratch> scratch(Backend& be, int rows) const override {
    return std::make_unique<MlpScratch>(be, c_, rows);
  }

 private:
  View feed_forward(const LayerStep& step, MixerScratch& scratch, const LayerResources& W, int l) const override {
    auto& s = static_cast<MlpScratch&>(scratch);
    step.be.moe_experts(*W.gate, *W.up, *W.down, step.x, s.one_expert, s.unit_weight, step.m, 1, s.out, {});
    step.hooks.tap(HookId::MlpOut, l, s.out);
    return View(s.out);
  }
};

}  // namespace

std::unique_ptr<ModelPlan> make_qwen3_5_plan(const ModelConfig& c) { return std::make_unique<Qwen35Plan>(c); }

}  // namespace moelens
