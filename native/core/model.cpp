#include "model.h"

#include "models/models.h"

namespace moelens {

std::unique_ptr<Model> Model::load(const std::string& dir, std::unique_ptr<Backend> backend, const Progress& progress) {
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = ModelConfig::load(dir);
  m->checkpoint_ = std::make_unique<Checkpoint>(dir);
  m->plan_ = make_plan(m->config_);
  m->weights_ = resolve_weights(m->config_, *m->checkpoint_);
  m->backend_ = std::move(backend);
  Backend& be = *m->backend_;
  const ModelWeights& w = m->weights_;
  const int total = int(w.layers.size()) + 1;
  m->embed_ = be.upload(w.embed);
  m->lm_head_ = be.upload(w.lm_head);
  m->final_norm_ = be.upload(w.final_norm);
  if (progress) progress(1, total);
  for (const LayerWeights& L : w.layers) {
    LayerResources r;
    r.input_norm = be.upload(L.input_norm);
    r.post_norm = be.upload(L.post_norm);
    if (L.kind == LayerKind::DeltaNet) {
      const DeltaNetWeights& d = L.deltanet;
      r.in_qkv = be.upload(d.in_qkv);
      r.in_z = be.upload(d.in_z);
      r.in_b = be.upload(d.in_b);
      r.in_a = be.upload(d.in_a);
      r.out = be.upload(d.out);
      r.conv = be.upload(d.conv);
      r.A_log = be.upload(d.A_log);
      r.dt_bias = be.upload(d.dt_bias);
      r.norm = be.upload(d.norm);
    } else {
      const AttentionWeights& a = L.attention;
      r.q = be.upload(a.q);
      r.k = be.upload(a.k);
      r.v = be.upload(a.v);
      r.o = be.upload(a.o);
      r.q_norm = be.upload(a.q_norm);
      r.k_norm = be.upload(a.k_norm);
    }
    if (m->config_.mlp_intermediate) {
      // One-expert stacks: the dense plan runs its SwiGLU through the expert kernel.
      auto stack = [](LinearWeight w) {
        w.experts = 1;
        return w;
      };
      r.gate = be.upload(stack(L.mlp.gate));
      r.up = be.upload(stack(L.mlp.up));
      r.down = be.upload(stack(L.mlp.down));
      m->layers_.push_back(std::move(r));
      if (progress) progress(int(m->layers_.size()) + 1, total);
      continue;
    }
    const MoEWeights& e = L.moe;
    r.router = be.upload(e.router);
    r.gate = be.upload(e.gate);
    r.up = be.upload(e.up);
    r.down = be.upload(e.down);
    r.shared_gate = be.upload(e.shared_gate);
    r.shared_up = be.upload(e.shared_up);
    r.shared_down = be.upload(e.shared_down);
    r.shared_expert_gate = be.upload(e.shared_expert_gate);
    m->layers_.push_back(std::move(r));
    if (progress) progress(int(m->layers_.size()) + 1, total);
  }
  return m;
}

}  // namespace moelens
