#include "hybrid_plan.h"

namespace moelens {

HybridPlan::HybridPlan(const ModelConfig& c, FeedForward ff) : c_(c) {
  for (LayerKind k : c.layer_kinds) {
    LayerParts p;
    p.deltanet = k == LayerKind::DeltaNet;
    p.attention = k == LayerKind::Attention;
    p.mlp = ff == FeedForward::Mlp;
    p.moe = ff == FeedForward::Moe;
    parts_.push_back(p);
  }
}

void HybridPlan::layer(const LayerStep& step, PlanScratch& scratch, LayerState& state, int l) const {
  auto& s = static_cast<MixerScratch&>(scratch);
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
  const View out = feed_forward(step, s, W, l);
  be.add(step.h, out, size_t(m) * H);
  step.hooks.tap(HookId::ResidPost, l, step.h);
}

}  // namespace moelens
