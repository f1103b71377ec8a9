#include "hook_points.h"

#include "error.h"

namespace moelens {

const std::vector<HookPoint>& hook_registry() {
  static const std::vector<HookPoint> points = {
#define MOELENS_HOOK_ENTRY(id, name, scope, dtype, access, layout, dims, meaning) \
  {HookId::id, name, HookScope::scope, HookDtype::dtype, HookAccess::access, HookLayout::layout, dims, meaning},
      MOELENS_HOOK_POINTS(MOELENS_HOOK_ENTRY)
#undef MOELENS_HOOK_ENTRY
  };
  return points;
}

const char* dim_name(HookDim d) {
  switch (d) {
    case HookDim::Hidden: return "hidden";
    case HookDim::Vocab: return "vocab";
    case HookDim::Experts: return "experts";
    case HookDim::TopK: return "top_k";
    case HookDim::Heads: return "heads";
    case HookDim::KvHeads: return "kv_heads";
    case HookDim::HeadDim: return "head_dim";
    case HookDim::KeyHeads: return "key_heads";
    case HookDim::KeyDim: return "key_dim";
    case HookDim::ValueHeads: return "value_heads";
    case HookDim::ValueDim: return "value_dim";
    case HookDim::ConvDim: return "conv_dim";
  }
  return "?";
}

int dim_size(const ModelConfig& c, HookDim d) {
  switch (d) {
    case HookDim::Hidden: return c.hidden_size;
    case HookDim::Vocab: return c.vocab_size;
    case HookDim::Experts: return c.num_experts;
    case HookDim::TopK: return c.experts_per_token;
    case HookDim::Heads: return c.num_heads;
    case HookDim::KvHeads: return c.num_kv_heads;
    case HookDim::HeadDim: return c.head_dim;
    case HookDim::KeyHeads: return c.linear_key_heads;
    case HookDim::KeyDim: return c.linear_key_dim;
    case HookDim::ValueHeads: return c.linear_value_heads;
    case HookDim::ValueDim: return c.linear_value_dim;
    case HookDim::ConvDim: return c.conv_dim();
  }
  return 0;
}

int hook_width(const ModelConfig& c, const HookPoint& p) {
  int w = 1;
  for (HookDim d : p.dims) w *= dim_size(c, d);
  return w;
}

bool LayerParts::has(HookScope s) const {
  switch (s) {
    case HookScope::Input:
    case HookScope::Output: return false;
    case HookScope::Layer: return true;
    case HookScope::DeltaNet: return deltanet;
    case HookScope::Attention: return attention;
    case HookScope::Moe: return moe;
    case HookScope::Mlp: return mlp;
  }
  return false;
}

namespace {

std::string instantiate(const char* name, int layer) {
  std::string s = name;
  const size_t at = s.find("{l}");
  if (at != std::string::npos) s.replace(at, 3, std::to_string(layer));
  return s;
}

// `*` matches a run of characters without '.'.
bool glob(const char* p, const char* s) {
  if (*p == '\0') return *s == '\0';
  if (*p == '*') {
    for (const char* t = s;; ++t) {
      if (glob(p + 1, t)) return true;
      if (*t == '\0' || *t == '.') return false;
    }
  }
  return *p == *s && glob(p + 1, s + 1);
}

}  // namespace

std::vector<HookInstance> hook_instances(const std::vector<LayerParts>& parts) {
  std::vector<HookInstance> out;
  const auto& reg = hook_registry();
  for (const HookPoint& p : reg)
    if (p.scope == HookScope::Input) out.push_back({p.id, -1, p.name});
  for (int l = 0; l < int(parts.size()); ++l)
    for (const HookPoint& p : reg)
      if (parts[size_t(l)].has(p.scope)) out.push_back({p.id, l, instantiate(p.name, l)});
  for (const HookPoint& p : reg)
    if (p.scope == HookScope::Output) out.push_back({p.id, -1, p.name});
  return out;
}

bool hook_pattern_matches(const std::string& pattern, const HookInstance& instance) {
  if (!glob(pattern.c_str(), instance.name.c_str())) return false;
  if (hook_point(instance.id).layout != HookLayout::AttentionProbs) return true;
  const size_t dot = pattern.rfind('.');
  return pattern.find('*', dot == std::string::npos ? 0 : dot) == std::string::npos;
}

}  // namespace moelens
