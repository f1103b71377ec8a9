// The registry of hook points: every intermediate value a caller may capture, edit or hand to a hook
// function, with one name, one shape and one meaning, defined here and nowhere else. Names follow
// TransformerLens ("blocks.{l}.resid_post"); a model plan marks where each value flows with a tap
// (plan.h), and the registry's per-layer instantiation (hook_instances) is what `model.hookPoints()`
// lists. Adding a hook point is one MOELENS_HOOK_POINTS entry plus its tap in the plans.
#pragma once

#include <string>
#include <vector>

#include "config.h"

namespace moelens {

// Where a hook point is: before the layers (Input), after them (Output), in every layer (Layer) or in
// the layers that have a part (DeltaNet, Attention, Moe, Mlp).
enum class HookScope { Input, Layer, DeltaNet, Attention, Moe, Mlp, Output };

// A named size of the model: a hook point's per-token shape is a list of these.
enum class HookDim {
  Hidden, Vocab, Experts, TopK, Heads, KvHeads, HeadDim, KeyHeads, KeyDim, ValueHeads, ValueDim, ConvDim
};

enum class HookDtype { F32, I32 };

// How a value may be used: Edit (capture, edits and hook functions) or Read (capture only: the value
// is a side output of a kernel, which nothing downstream reads).
enum class HookAccess { Edit, Read };

// Layout of the captured value: PerToken is [n, dims...]; AttentionProbs is [heads, n, context]
// (softmax weights of each query over every key so far), opt-in (a wildcard never selects it).
enum class HookLayout { PerToken, AttentionProbs };

#define MOELENS_DIMS(...) \
  { __VA_ARGS__ }

// X(id, name, scope, dtype, access, layout, dims, meaning)
#define MOELENS_HOOK_POINTS(X)                                                                                        \
  X(Embed, "embed", Input, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden), "token embeddings")                   \
  X(ResidPre, "blocks.{l}.resid_pre", Layer, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),                     \
    "residual stream entering the layer")                                                                             \
  X(DeltaNetConvOut, "blocks.{l}.deltanet.conv_out", DeltaNet, F32, Edit, PerToken, MOELENS_DIMS(HookDim::ConvDim),  \
    "q, k and v side by side, after the causal conv and SiLU")                                                                      \
  X(DeltaNetQ, "blocks.{l}.deltanet.q", DeltaNet, F32, Edit, PerToken,                                              \
    MOELENS_DIMS(HookDim::KeyHeads, HookDim::KeyDim), "queries after the conv (before the l2 norm)")                 \
  X(DeltaNetK, "blocks.{l}.deltanet.k", DeltaNet, F32, Edit, PerToken,                                              \
    MOELENS_DIMS(HookDim::KeyHeads, HookDim::KeyDim), "keys after the conv (before the l2 norm)")                    \
  X(DeltaNetV, "blocks.{l}.deltanet.v", DeltaNet, F32, Edit, PerToken,                                              \
    MOELENS_DIMS(HookDim::ValueHeads, HookDim::ValueDim), "values after the conv")                                   \
  X(DeltaNetBeta, "blocks.{l}.deltanet.beta", DeltaNet, F32, Read, PerToken, MOELENS_DIMS(HookDim::ValueHeads),      \
    "write strength sigmoid(b) per value head")                                                                      \
  X(DeltaNetDecay, "blocks.{l}.deltanet.decay", DeltaNet, F32, Read, PerToken, MOELENS_DIMS(HookDim::ValueHeads),    \
    "state decay exp(g) per value head")                                                                             \
  X(DeltaNetStateNorm, "blocks.{l}.deltanet.state_norm", DeltaNet, F32, Read, PerToken,                             \
    MOELENS_DIMS(HookDim::ValueHeads), "Frobenius norm of each head's recurrent state after the token")              \
  X(DeltaNetHeadOut, "blocks.{l}.deltanet.head_out", DeltaNet, F32, Edit, PerToken,                                 \
    MOELENS_DIMS(HookDim::ValueHeads, HookDim::ValueDim), "per-head output after the gated RMSNorm, before out_proj") \
  X(DeltaNetOut, "blocks.{l}.deltanet.out", DeltaNet, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),           \
    "DeltaNet sublayer output (after out_proj)")                                                                     \
  X(AttnQ, "blocks.{l}.attn.q", Attention, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Heads, HookDim::HeadDim),     \
    "queries after the q norm and RoPE")                                                                             \
  X(AttnK, "blocks.{l}.attn.k", Attention, F32, Edit, PerToken, MOELENS_DIMS(HookDim::KvHeads, HookDim::HeadDim),   \
    "keys after the k norm and RoPE, as cached (a GPU at fp16 caches them as halves)")                              \
  X(AttnV, "blocks.{l}.attn.v", Attention, F32, Edit, PerToken, MOELENS_DIMS(HookDim::KvHeads, HookDim::HeadDim),   \
    "values, as cached (a GPU at fp16 caches them as halves)")                                                      \
  X(AttnGate, "blocks.{l}.attn.gate", Attention, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Heads, HookDim::HeadDim), \
    "output gate logits (the output is multiplied by their sigmoid)")                                               \
  X(AttnProbs, "blocks.{l}.attn.probs", Attention, F32, Read, AttentionProbs, MOELENS_DIMS(HookDim::Heads),         \
    "softmax weights [heads, n, context] (opt-in: name it without a wildcard)")                                     \
  X(AttnHeadOut, "blocks.{l}.attn.head_out", Attention, F32, Edit, PerToken,                                        \
    MOELENS_DIMS(HookDim::Heads, HookDim::HeadDim), "per-head gated output, before o_proj")                          \
  X(AttnOut, "blocks.{l}.attn.out", Attention, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),                  \
    "attention sublayer output (after o_proj)")                                                                      \
  X(ResidMid, "blocks.{l}.resid_mid", Layer, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),                    \
    "residual stream after the DeltaNet or attention sublayer")                                                      \
  X(MoeRouterLogits, "blocks.{l}.moe.router_logits", Moe, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Experts),      \
    "router logits")                                                                                                 \
  X(MoeRouterProbs, "blocks.{l}.moe.router_probs", Moe, F32, Read, PerToken, MOELENS_DIMS(HookDim::Experts),        \
    "router probabilities (softmax of the logits, after router edits)")                                              \
  X(MoeTopkIds, "blocks.{l}.moe.topk_ids", Moe, I32, Read, PerToken, MOELENS_DIMS(HookDim::TopK), "chosen experts") \
  X(MoeTopkWeights, "blocks.{l}.moe.topk_weights", Moe, F32, Edit, PerToken, MOELENS_DIMS(HookDim::TopK),           \
    "weights of the chosen experts")                                                                                 \
  X(MoeSharedGate, "blocks.{l}.moe.shared_gate", Moe, F32, Edit, PerToken, MOELENS_DIMS(),                          \
    "shared-expert gate logit (the shared expert is multiplied by its sigmoid)")                                     \
  X(MoeExpertOut, "blocks.{l}.moe.expert_out", Moe, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),             \
    "weighted sum of the routed experts")                                                                            \
  X(MoeSharedOut, "blocks.{l}.moe.shared_out", Moe, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),             \
    "gated shared expert output")                                                                                    \
  X(MoeOut, "blocks.{l}.moe.out", Moe, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),                          \
    "MoE sublayer output (routed experts + shared expert)")                                                          \
  X(MlpOut, "blocks.{l}.mlp.out", Mlp, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),                        \
    "dense MLP output (SwiGLU)")                                                                                     \
  X(ResidPost, "blocks.{l}.resid_post", Layer, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),                  \
    "residual stream leaving the layer")                                                                              \
  X(FinalNorm, "final_norm", Output, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Hidden),                             \
    "final RMSNorm output (the lm_head input)")                                                                      \
  X(Logits, "logits", Output, F32, Edit, PerToken, MOELENS_DIMS(HookDim::Vocab), "next-token logits")

enum class HookId {
#define MOELENS_HOOK_ID(id, ...) id,
  MOELENS_HOOK_POINTS(MOELENS_HOOK_ID)
#undef MOELENS_HOOK_ID
};

struct HookPoint {
  HookId id;
  const char* name;  // with "{l}" for the layer
  HookScope scope;
  HookDtype dtype;
  HookAccess access;
  HookLayout layout;
  std::vector<HookDim> dims;  // per token (PerToken) or before the token axis (AttentionProbs)
  const char* meaning;
};

// Every hook point, in forward order; hook_point(id) is registry()[int(id)].
const std::vector<HookPoint>& hook_registry();
inline const HookPoint& hook_point(HookId id) { return hook_registry()[size_t(id)]; }
constexpr int kHookCount = 0
#define MOELENS_HOOK_COUNT(...) +1
    MOELENS_HOOK_POINTS(MOELENS_HOOK_COUNT)
#undef MOELENS_HOOK_COUNT
    ;

const char* dim_name(HookDim d);
int dim_size(const ModelConfig& c, HookDim d);
// Values per token (PerToken) of a hook point: the product of its dims.
int hook_width(const ModelConfig& c, const HookPoint& p);

// The parts a layer has; a model plan describes each of its layers this way.
struct LayerParts {
  bool deltanet = false, attention = false, moe = false, mlp = false;
  bool has(HookScope s) const;
};

// One hook point at one layer (layer -1 for model-wide points).
struct HookInstance {
  HookId id;
  int layer;
  std::string name;
};

// The hook points of a model whose layers have `parts`, in forward order.
std::vector<HookInstance> hook_instances(const std::vector<LayerParts>& parts);

// Glob over names: `*` matches any run of characters other than '.'. A wildcard never selects an
// opt-in point (AttentionProbs): its last segment must be written out.
bool hook_pattern_matches(const std::string& pattern, const HookInstance& instance);

}  // namespace moelens
