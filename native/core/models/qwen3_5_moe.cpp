// qwen3_5_moe (Qwen3.5 / 3.6 MoE): the hybrid layers (hybrid_plan.h) whose feed-forward is a mixture
// of experts with a gated shared expert.
#include <cmath>

#include "../model.h"
#include "hybrid_plan.h"
#include "models.h"

namespace moelens {

namespace {

struct MoeScratch : MixerScratch {
  std::unique_ptr<Buffer> router_logits, router_bias, route_ids, route_weights, routed, shared_gate, split, no_weights;
  std::vector<float> bias;

  MoeScratch(Backend& be, const ModelConfig& c, int m) : MixerScratch(be, c, m) {
    router_logits = alloc(be, m, c.num_experts);
    router_bias = alloc(be, m, c.num_experts);
    route_ids = be.alloc(ElemType::I32, size_t(m) * c.experts_per_token);
    route_weights = alloc(be, m, c.experts_per_token);
    routed = alloc(be, m, c.hidden_size);
    shared_gate = alloc(be, m, 1);
  }
  size_t elements() const override {
    size_t n = MixerScratch::elements();
    for (const auto* b : {&router_logits, &router_bias, &route_ids, &route_weights, &routed, &shared_gate, &split, &no_weights})
      n += *b ? (*b)->count() : 0;
    return n;
  }
};

bool covers(const std::vector<int>& positions, int pos) {
  for (int p : positions)
    if (p == pos) return true;
  return positions.empty();
}

class Qwen35MoePlan : public HybridPlan {
 public:
  explicit Qwen35MoePlan(const ModelConfig& c) : HybridPlan(c, FeedForward::Moe) {}

  std::unique_ptr<PlanScratch> scratch(Backend& be, int rows) const override {
    return std::make_unique<MoeScratch>(be, c_, rows);
  }

 private:
  // Mixture of experts with the gated shared expert: x [m, hidden] -> s.routed.
  View feed_forward(const LayerStep& step, MixerScratch& scratch, const LayerResources& W, int l) const override {
    auto& s = static_cast<MoeScratch&>(scratch);
    Backend& be = step.be;
    HookRun& hooks = step.hooks;
    const int m = step.m, E = c_.num_experts, K = c_.experts_per_token, H = c_.hidden_size;

    // Router edits become a bias on the router logits: -inf disables, +inf forces, finite values add.
    s.bias.assign(size_t(m) * E, 0.f);
    bool biased = false;
    float shared_scale = 1.0f;
    for (const Intervention& iv : step.interventions) {
      if (iv.kind == Intervention::Kind::ScaleShared && (iv.layer == -1 || iv.layer == l)) shared_scale *= iv.scale;
      const bool disable = iv.kind == Intervention::Kind::DisableExperts, force = iv.kind == Intervention::Kind::ForceExperts;
      if (!(disable || force || iv.kind == Intervention::Kind::BiasExperts) || iv.layer != l) continue;
      for (int j = 0; j < m; ++j) {
        if (!covers(iv.positions, step.pos + j)) continue;
        for (size_t i = 0; i < iv.experts.size(); ++i) {
          float& b = s.bias[size_t(j) * E + iv.experts[i]];
          b = disable ? -INFINITY : force ? INFINITY : b + iv.values[i];
        }
        biased = true;
      }
    }
    View router_bias;
    if (biased) {
      be.write(s.router_bias, s.bias.data(), s.bias.size());
      router_bias = View(s.router_bias);
    }

    // The router and the shared expert's gate read the same input (the shared expert runs in moe_experts).
    be.matmul_group({{W.router.get(), s.router_logits, true}, {W.shared_expert_gate.get(), s.shared_gate, true}}, step.x, m);
    hooks.tap(HookId::MoeRouterLogits, l, s.router_logits);
    hooks.tap(HookId::MoeSharedGate, l, s.shared_gate);
    be.route(s.router_logits, router_bias, m, E, K, c_.norm_topk_prob, s.route_ids, s.route_weights,
             hooks.sink(HookId::MoeRouterProbs, l));
    hooks.tap(HookId::MoeTopkIds, l, s.route_ids);
    hooks.tap(HookId::MoeTopkWeights, l, s.route_weights);
    Backend::SharedExpert shared;  // removed by an intervention when its scale is 0
    if (shared_scale != 0.f)
      shared = {W.shared_gate.get(), W.shared_up.get(), W.shared_down.get(), View(s.shared_gate), shared_scale};
    if (hooks.active(HookId::MoeExpertOut, l) || hooks.active(HookId::MoeSharedOut, l)) {
      // The routed and the shared experts separately (one fused call otherwise): the second call runs
      // the shared expert with every routed weight 0.
      if (!s.split || s.split->count() < size_t(m) * H) s.split = be.alloc(ElemType::F32, size_t(m) * H);
      if (!s.no_weights || s.no_weights->count() < size_t(m) * K) s.no_weights = be.alloc(ElemType::F32, size_t(m) * K);
      be.moe_experts(*W.gate, *W.up, *W.down, step.x, s.route_ids, s.route_weights, m, K, s.routed, {});
      hooks.tap(HookId::MoeExpertOut, l, s.routed);
      if (shared.gate) be.moe_experts(*W.gate, *W.up, *W.down, step.x, s.route_ids, s.no_weights, m, K, s.split, shared);
      else be.fill(s.split, 0.f, size_t(m) * H);
      hooks.tap(HookId::MoeSharedOut, l, s.split);
      be.add(s.routed, s.split, size_t(m) * H);
    } else {
      be.moe_experts(*W.gate, *W.up, *W.down, step.x, s.route_ids, s.route_weights, m, K, s.routed, shared);
    }
    hooks.tap(HookId::MoeOut, l, s.routed);
    return View(s.routed);
  }
};

}  // namespace

std::unique_ptr<ModelPlan> make_qwen3_5_moe_plan(const ModelConfig& c) { return std::make_unique<Qwen35MoePlan>(c); }

}  // namespace moelens
