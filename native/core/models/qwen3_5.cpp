// qwen3_5 (Qwen3.5 dense): the hybrid layers of qwen3_5_moe with a dense SwiGLU MLP in place of the
// mixture of experts. The MLP runs through the expert kernel as one expert of weight 1, so every
// backend runs it without a kernel of its own.
#include "mixers.h"
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

class Qwen35Plan : public ModelPlan {
 public:
  explicit Qwen35Plan(const ModelConfig& c) : c_(c) {
    for (LayerKind k : c.layer_kinds) {
      LayerParts p;
      p.deltanet = k == LayerKind::DeltaNet;
      p.attention = k == LayerKind::Attention;
      p.mlp = true;
      parts_.push_back(p);
    }
  }

  const std::vector<LayerParts>& parts() const override { return parts_; }

  std::unique_ptr<PlanScratch> scratch(Backend& be, int rows) const override {
    return std::make_unique<MlpScratch>(be, c_, rows);
  }

  void layer(const LayerStep& step, PlanScratch& scratch, LayerState& state, int l) const override {
    auto& s = static_cast<MlpScratch&>(scratch);
    const LayerResources& W = step.model.layer(l);
    Backend& be = step.be;
    const int m = step.m, H = c_.hidden_size;
    step.hooks.tap(HookId::ResidPre, l, step.h);
    be.rms_norm(step.h, W.input_norm, m, H, c_.rms_norm_eps, step.x);
    if (parts_[size_t(l)].deltanet) run_deltanet(step, s, state, W, l);
    else run_attention(step, s, state, W, l);
    be.add(step.h, s.mix, size_t(m) * H);
    step.hooks.tap(HookId::ResidMid, l, step.h);
    be.rms_norm(step.h, W.post_norm, m, H, c_.rms_norm_eps, step.x);
    be.moe_experts(*W.gate, *W.up, *W.down, step.x, s.one_expert, s.unit_weight, m, 1, s.out, {});
    step.hooks.tap(HookId::MlpOut, l, s.out);
    be.add(step.h, s.out, size_t(m) * H);
    step.hooks.tap(HookId::ResidPost, l, step.h);
  }

 private:
  const ModelConfig c_;
  std::vector<LayerParts> parts_;
};

}  // namespace

std::unique_ptr<ModelPlan> make_qwen3_5_plan(const ModelConfig& c) { return std::make_unique<Qwen35Plan>(c); }

}  // namespace moelens
