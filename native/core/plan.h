// A model plan: what one architecture runs in each layer, as backend kernels with the hook points
// (taps) between them. One file per architecture in models/; the session runs whichever plan the
// config names and does not know the architecture. The session owns the per-layer state that the
// hybrid family shares (a DeltaNet layer's conv window and recurrent state, an attention layer's KV
// cache); everything else a layer needs lives in the plan's work buffers.
#pragma once

#include <memory>
#include <vector>

#include "backend.h"
#include "config.h"
#include "hook_run.h"
#include "intervention.h"

namespace moelens {

class Model;

struct LayerState {
  std::unique_ptr<Buffer> conv, recurrent;   // DeltaNet
  std::unique_ptr<Buffer> k_cache, v_cache;  // attention: [positions, kv_heads * head_dim] of kv_cache_type
};

// The attention layers' shape, from the config.
inline AttentionShape attention_shape(const ModelConfig& c) {
  return {c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim, c.attn_output_gate, float(c.rope_theta), c.rms_norm_eps};
}

// A plan's work buffers for a number of tokens, reused across calls.
class PlanScratch {
 public:
  virtual ~PlanScratch() = default;
  virtual int rows() const = 0;
  virtual size_t elements() const = 0;
};

// What one layer of one chunk runs against.
struct LayerStep {
  Backend& be;
  const Model& model;
  int m;    // tokens in the chunk
  int pos;  // position of the first
  View h;   // the residual stream [m, hidden], updated in place
  View x;   // a [m, hidden] work buffer
  HookRun& hooks;
  const std::vector<Intervention>& interventions;
};

class ModelPlan {
 public:
  virtual ~ModelPlan() = default;
  // The parts of each layer (which hook points it has).
  virtual const std::vector<LayerParts>& parts() const = 0;
  virtual std::unique_ptr<PlanScratch> scratch(Backend& be, int rows) const = 0;
  // Runs layer `l`: reads the residual stream, adds the layer's output to it, taps its hook points
  // from resid_pre to resid_post.
  virtual void layer(const LayerStep& step, PlanScratch& scratch, LayerState& state, int l) const = 0;
};

}  // namespace moelens
