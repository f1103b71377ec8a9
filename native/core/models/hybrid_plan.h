// The layer plumbing of the Qwen3.5 hybrid family, shared by its plans: each layer is a token mixer
// (Gated DeltaNet or gated attention, by config.json's layer_types) then a feed-forward, each behind
// an RMSNorm and added to the residual stream, with resid_pre, resid_mid and resid_post around them.
// A plan of the family says only what its feed-forward is.
#pragma once

#include "../config.h"
#include "mixers.h"

namespace moelens {

class HybridPlan : public ModelPlan {
 public:
  enum class FeedForward { Mlp, Moe };

  HybridPlan(const ModelConfig& c, FeedForward ff);

  const std::vector<LayerParts>& parts() const override { return parts_; }
  void layer(const LayerStep& step, PlanScratch& scratch, LayerState& state, int l) const override;

 protected:
  // Layer l's feed-forward of the normed residual (step.x), with its hook points; returns its output
  // [m, hidden], which the layer adds to the residual stream. `s` is the plan's own scratch.
  virtual View feed_forward(const LayerStep& step, MixerScratch& s, const LayerResources& W, int l) const = 0;

  const ModelConfig c_;

 private:
  std::vector<LayerParts> parts_;
};

}  // namespace moelens
