// The token mixers of the Qwen3.5 hybrid family, shared by its plans: the Gated DeltaNet and the
// gated attention sublayer, each from the normed residual (step.x) to the sublayer output (s.mix),
// with their hook points.
#pragma once

#include "../model.h"
#include "../plan.h"

namespace moelens {

struct MixerScratch : PlanScratch {
  int m;
  std::unique_ptr<Buffer> mix, qkv, qkv_conv, z, b, a, core, qg, q, k, v, gate, attn;

  MixerScratch(Backend& be, const ModelConfig& c, int rows);
  int rows() const override { return m; }
  size_t elements() const override;
  static std::unique_ptr<Buffer> alloc(Backend& be, int rows, int width);
};

void run_deltanet(const LayerStep& step, MixerScratch& s, LayerState& state, const LayerResources& W, int l);
void run_attention(const LayerStep& step, MixerScratch& s, LayerState& state, const LayerResources& W, int l);

}  // namespace moelens
