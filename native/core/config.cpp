#include "config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "error.h"
#include "json.h"

namespace moelens {

namespace {

// Typed field access with errors that name the file and the field.
class Fields {
 public:
  Fields(const Json& obj, std::string path, std::string prefix) : obj_(obj), path_(std::move(path)), prefix_(std::move(prefix)) {}

  const Json* get(const char* key) const { return obj_.find(key); }

  int integer(const char* key, int min_value = 1) const {
    const Json* v = obj_.find(key);
    if (!v) fail(path_, ": missing field '", prefix_, key, "'");
    return checked_int(*v, key, min_value);
  }

  int integer_or(const char* key, int fallback, int min_value = 1) const {
    const Json* v = obj_.find(key);
    if (!v || v->is_null()) return fallback;
    return checked_int(*v, key, min_value);
  }

  double number_or(const char* key, double fallback) const {
    const Json* v = obj_.find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number() || !std::isfinite(v->as_number()))
      fail(path_, ": field '", prefix_, key, "' must be a finite number, not ", Json::type_name(v->type()));
    return v->as_number();
  }

  bool boolean_or(const char* key, bool fallback) const {
    const Json* v = obj_.find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_bool()) fail(path_, ": field '", prefix_, key, "' must be a boolean");
    return v->as_bool();
  }

  std::string where(const char* key) const { return path_ + ": field '" + prefix_ + key + "'"; }

 private:
  int checked_int(const Json& v, const char* key, int min_value) const {
    if (!v.is_integer()) fail(path_, ": field '", prefix_, key, "' must be an integer, not ", Json::type_name(v.type()));
    double d = v.as_number();
    if (d < min_value || d > 1e9) fail(path_, ": field '", prefix_, key, "' = ", d, " is out of range");
    return int(d);
  }

  const Json& obj_;
  std::string path_;
  std::string prefix_;
};

QuantSpec parse_quant(const Json& q, const std::string& path, const std::string& field) {
  QuantSpec s;
  const Json* bits = q.find("bits");
  const Json* gs = q.find("group_size");
  if (!bits || !bits->is_integer()) fail(path, ": field '", field, ".bits' must be an integer");
  if (!gs || !gs->is_integer()) fail(path, ": field '", field, ".group_size' must be an integer");
  s.bits = int(bits->as_number());
  s.group_size = int(gs->as_number());
  if (s.bits != 4 && s.bits != 8) fail(path, ": field '", field, ".bits' = ", s.bits, " is not supported (4 or 8)");
  if (s.group_size < 8 || s.group_size > 4096 || s.group_size % 8 != 0)
    fail(path, ": field '", field, ".group_size' = ", s.group_size, " is not a supported group size");
  if (const Json* mode = q.find("mode"))
    if (!mode->is_string() || mode->as_string() != "affine")
      fail(path, ": field '", field, ".mode' must be \"affine\"");
  return s;
}

}  // namespace

int ModelConfig::num_deltanet_layers() const {
  int n = 0;
  for (auto k : layer_kinds) n += k == LayerKind::DeltaNet;
  return n;
}

int ModelConfig::num_attention_layers() const { return num_layers - num_deltanet_layers(); }

ModelConfig ModelConfig::load(const std::string& dir) {
  std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open (is '", dir, "' a model directory?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

ModelConfig ModelConfig::parse(const std::string& text, const std::string& path) {
  Json root = Json::parse(text, path);
  if (!root.is_object()) fail(path, ": config is not a JSON object");
  ModelConfig c;
  const Json* mt = root.find("model_type");
  if (!mt || !mt->is_string()) fail(path, ": missing field 'model_type'");
  c.model_type = mt->as_string();

  // The families: the top-level model_type with a text_config, or the bare text model_type.
  static const std::pair<const char*, const char*> kFamilies[] = {{"qwen3_5_moe", "qwen3_5_moe_text"},
                                                                  {"qwen3_5", "qwen3_5_text"}};
  const Json* text_cfg = &root;
  std::string prefix;
  bool known = false, dense = false;
  for (const auto& [top, text] : kFamilies) {
    if (c.model_type == top) {
      text_cfg = root.find("text_config");
      if (!text_cfg || !text_cfg->is_object())
        fail(path, ": model_type '", top, "' needs an object field 'text_config'");
      prefix = "text_config.";
      const Json* inner = text_cfg->find("model_type");
      if (inner && (!inner->is_string() || inner->as_string() != text))
        fail(path, ": field 'text_config.model_type' must be \"", text, "\"");
    } else if (c.model_type != text) {
      continue;
    }
    known = true;
    dense = std::string(top) == "qwen3_5";
  }
  if (!known)
    fail(path, ": unknown architecture: model_type '", c.model_type,
         "' (supported: 'qwen3_5_moe', 'qwen3_5_moe_text', 'qwen3_5' and 'qwen3_5_text')");
  Fields f(*text_cfg, path, prefix);

  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads");
  c.head_dim = f.integer_or("head_dim", c.hidden_size / c.num_heads);
  c.attn_output_gate = f.boolean_or("attn_output_gate", true);
  c.linear_key_heads = f.integer("linear_num_key_heads");
  c.linear_value_heads = f.integer("linear_num_value_heads");
  c.linear_key_dim = f.integer("linear_key_head_dim");
  c.linear_value_dim = f.integer("linear_value_head_dim");
  c.conv_kernel = f.integer("linear_conv_kernel_dim");
  if (dense) {
    c.mlp_intermediate = f.integer("intermediate_size");
  } else {
    c.num_experts = f.integer("num_experts");
    c.experts_per_token = f.integer("num_experts_per_tok");
    c.expert_intermediate = f.integer("moe_intermediate_size");
    c.shared_intermediate = f.integer("shared_expert_intermediate_size");
    c.norm_topk_prob = f.boolean_or("norm_topk_prob", true);
  }
  c.rms_norm_eps = float(f.number_or("rms_norm_eps", 1e-6));
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", root.find("tie_word_embeddings") &&
                                                                      root.find("tie_word_embeddings")->is_bool() &&
                                                                      root.find("tie_word_embeddings")->as_bool());
  c.max_position_embeddings = f.integer_or("max_position_embeddings", 262144);

  if (const Json* act = f.get("hidden_act"))
    if (!act->is_string() || act->as_string() != "silu") fail(f.where("hidden_act"), " must be \"silu\"");

  // RoPE: rope_parameters (transformers 5) or the older flat fields.
  double partial = f.number_or("partial_rotary_factor", 1.0);
  c.rope_theta = f.number_or("rope_theta", 10000.0);
  if (const Json* rp = f.get("rope_parameters")) {
    if (!rp->is_object()) fail(f.where("rope_parameters"), " must be an object");
    Fields r(*rp, path, prefix + "rope_parameters.");
    if (const Json* rt = rp->find("rope_type"))
      if (!rt->is_string() || rt->as_string() != "default")
        fail(r.where("rope_type"), " must be \"default\" (other RoPE scalings are not supported)");
    c.rope_theta = r.number_or("rope_theta", c.rope_theta);
    partial = r.number_or("partial_rotary_factor", partial);
  }
  if (!(partial > 0 && partial <= 1)) fail(f.where("partial_rotary_factor"), " must be in (0, 1]");
  if (!(c.rope_theta > 0)) fail(f.where("rope_theta"), " must be positive");
  c.rotary_dim = int(c.head_dim * partial);
  if (c.rotary_dim < 2 || c.rotary_dim % 2) fail(f.where("partial_rotary_factor"), " gives an odd or empty rotary dimension");
  if (!(c.rms_norm_eps > 0)) fail(f.where("rms_norm_eps"), " must be positive");

  // Layer schedule.
  if (const Json* lt = f.get("layer_types")) {
    if (!lt->is_array() || int(lt->items().size()) != c.num_layers)
      fail(f.where("layer_types"), " must be an array of num_hidden_layers (", c.num_layers, ") strings");
    for (const Json& t : lt->items()) {
      if (t.is_string() && t.as_string() == "linear_attention") c.layer_kinds.push_back(LayerKind::DeltaNet);
      else if (t.is_string() && t.as_string() == "full_attention") c.layer_kinds.push_back(LayerKind::Attention);
      else fail(f.where("layer_types"), " has an entry that is neither \"linear_attention\" nor \"full_attention\"");
    }
  } else {
    int interval = f.integer_or("full_attention_interval", 4);
    for (int i = 0; i < c.num_layers; ++i)
      c.layer_kinds.push_back((i + 1) % interval == 0 ? LayerKind::Attention : LayerKind::DeltaNet);
  }

  // Consistency of the sizes.
  if (c.num_heads % c.num_kv_heads) fail(f.where("num_key_value_heads"), " must divide num_attention_heads");
  if (c.linear_value_heads % c.linear_key_heads)
    fail(f.where("linear_num_key_heads"), " must divide linear_num_value_heads");
  if (c.experts_per_token > c.num_experts) fail(f.where("num_experts_per_tok"), " exceeds num_experts");
  if (c.conv_kernel < 2 || c.conv_kernel > 16) fail(f.where("linear_conv_kernel_dim"), " must be between 2 and 16");

  // End-of-sequence ids: text_config, then the top level.
  for (const Json* src : {f.get("eos_token_id"), root.find("eos_token_id")}) {
    if (!src || !c.eos_token_ids.empty()) continue;
    if (src->is_integer()) c.eos_token_ids.push_back(int(src->as_number()));
    else if (src->is_array())
      for (const Json& e : src->items())
        if (e.is_integer()) c.eos_token_ids.push_back(int(e.as_number()));
  }

  // Quantization (mlx-community writes both keys; they agree).
  const Json* q = root.find("quantization");
  if (!q) q = root.find("quantization_config");
  if (q) {
    if (!q->is_object()) fail(path, ": field 'quantization' must be an object");
    c.quant_default = parse_quant(*q, path, "quantization");
    for (const auto& [key, val] : q->members()) {
      if (!val.is_object()) continue;
      c.quant_overrides[key] = parse_quant(val, path, "quantization." + key);
    }
  }
  return c;
}

}  // namespace moelens
