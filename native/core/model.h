// A loaded model: its config, the mapped checkpoint, and every weight resident on one backend.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "checkpoint.h"
#include "config.h"
#include "plan.h"
#include "weights.h"

namespace moelens {

class Session;

struct LayerResources {
  std::unique_ptr<Buffer> input_norm, post_norm;
  // Gated DeltaNet
  std::unique_ptr<Weight> in_qkv, in_z, in_b, in_a, out;
  std::unique_ptr<Buffer> conv, A_log, dt_bias, norm;
  // gated attention
  std::unique_ptr<Weight> q, k, v, o;
  std::unique_ptr<Buffer> q_norm, k_norm;
  // MoE; a dense MLP uses gate, up and down alone, as one-expert stacks
  std::unique_ptr<Weight> router, gate, up, down, shared_gate, shared_up, shared_down, shared_expert_gate;
};

class Model {
 public:
  // progress(done, total) is called as layers are placed on the backend.
  using Progress = std::function<void(int done, int total)>;
  static std::unique_ptr<Model> load(const std::string& dir, std::unique_ptr<Backend> backend,
                                     const Progress& progress = nullptr);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return *backend_; }
  const std::string& dir() const { return dir_; }
  size_t weight_bytes() const { return checkpoint_->total_bytes(); }

  const Weight& embed() const { return *embed_; }
  const Weight& lm_head() const { return *lm_head_; }
  View final_norm() const { return View(final_norm_); }
  const LayerResources& layer(int i) const { return layers_[size_t(i)]; }
  // What each layer runs (models/), from config.json's model_type.
  const ModelPlan& plan() const { return *plan_; }

 private:
  Model() = default;
  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  ModelWeights weights_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Weight> embed_, lm_head_;
  std::unique_ptr<Buffer> final_norm_;
  std::vector<LayerResources> layers_;
  std::unique_ptr<ModelPlan> plan_;
};

}  // namespace moelens
