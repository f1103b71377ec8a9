#include "weights.h"

#include <cmath>

#include "error.h"

namespace moelens {

size_t LinearWeight::bytes() const {
  size_t per = size_t(rows) * (row_bytes() + 2 * scale_row_bytes());
  return per * size_t(experts ? experts : 1);
}

namespace {

std::string shape_of(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Resolver {
 public:
  Resolver(const ModelConfig& c, Checkpoint& ck) : c_(c), ck_(ck) {}

  ModelWeights run() {
    ModelWeights w;
    detect_prefix(w);
    const int H = c_.hidden_size;
    w.layout = detect_layout(w.prefix);
    layout_ = w.layout;

    w.embed = linear(w.prefix + "embed_tokens", c_.vocab_size, H);
    if (ck_.has(head_ + "weight")) w.lm_head = linear(head_.substr(0, head_.size() - 1), c_.vocab_size, H);
    else if (c_.tie_word_embeddings) w.lm_head = w.embed;
    else fail(ck_.dir(), ": missing tensor '", head_, "weight' (and tie_word_embeddings is false)");
    w.final_norm = norm_vector(w.prefix + "norm.weight", H, true);

    for (int i = 0; i < c_.num_layers; ++i) {
      std::string p = w.prefix + "layers." + std::to_string(i) + ".";
      LayerWeights L;
      L.kind = c_.layer_kinds[i];
      L.input_norm = norm_vector(p + "input_layernorm.weight", H, true);
      L.post_norm = norm_vector(p + "post_attention_layernorm.weight", H, true);
      if (L.kind == LayerKind::DeltaNet) resolve_deltanet(p + "linear_attn.", L.deltanet);
      else resolve_attention(p + "self_attn.", L.attention);
      if (c_.mlp_intermediate) resolve_mlp(p + "mlp.", L.mlp);
      else resolve_moe(p + "mlp.", L.moe);
      w.layers.push_back(std::move(L));
    }
    ck_.check_all_consumed({"mtp.", "model.mtp.", "model.visual.", "visual.", "vision_tower.", "model.vision_tower.",
                            "language_model.mtp.", "model.language_model.mtp."});
    return w;
  }

 private:
  const ModelConfig& c_;
  Checkpoint& ck_;
  std::string head_;  // lm_head prefix including the trailing dot
  CheckpointLayout layout_ = CheckpointLayout::HF;

  void detect_prefix(ModelWeights& w) {
    const std::pair<const char*, const char*> candidates[] = {
        {"model.language_model.", "lm_head."},
        {"language_model.model.", "language_model.lm_head."},
        {"model.", "lm_head."},
    };
    for (const auto& [body, head] : candidates) {
      if (ck_.has(std::string(body) + "embed_tokens.weight")) {
        w.prefix = body;
        head_ = head;
        return;
      }
    }
    fail(ck_.dir(), ": no text-model embedding found (looked for 'model.language_model.embed_tokens.weight', "
                    "'language_model.model.embed_tokens.weight' and 'model.embed_tokens.weight')");
  }

  // HF stores conv1d as [C, 1, K] and the zero-centred norms as w; mlx-community as [C, K, 1] and 1+w.
  CheckpointLayout detect_layout(const std::string& prefix) {
    for (int i = 0; i < c_.num_layers; ++i) {
      if (c_.layer_kinds[i] != LayerKind::DeltaNet) continue;
      std::string name = prefix + "layers." + std::to_string(i) + ".linear_attn.conv1d.weight";
      if (!ck_.has(name)) fail(ck_.dir(), ": missing tensor '", name, "'");
      const TensorView& t = *ck_.all().at(name);
      if (t.shape.size() == 3 && t.shape[1] == 1 && t.shape[2] == c_.conv_kernel) return CheckpointLayout::HF;
      if (t.shape.size() == 3 && t.shape[1] == c_.conv_kernel && t.shape[2] == 1) return CheckpointLayout::MLX;
      fail(t.file, ": tensor '", name, "' has shape ", t.shape_str(), "; expected [", c_.conv_dim(), ", 1, ",
           c_.conv_kernel, "] (HF) or [", c_.conv_dim(), ", ", c_.conv_kernel, ", 1] (MLX)");
    }
    return prefix == "language_model.model." ? CheckpointLayout::MLX : CheckpointLayout::HF;
  }

  [[noreturn]] void bad_shape(const TensorView& t, const std::vector<int64_t>& want) {
    fail(t.file, ": tensor '", t.name, "' has shape ", t.shape_str(), " but the config implies ", shape_of(want));
  }

  const TensorView& float_tensor(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView& t = ck_.take(name);
    if (!is_float_dtype(t.dtype))
      fail(t.file, ": tensor '", name, "' has dtype ", dtype_name(t.dtype), "; expected F32, F16 or BF16");
    if (t.shape != shape) bad_shape(t, shape);
    return t;
  }

  std::vector<float> float_vector(const std::string& name, int64_t n) {
    const TensorView& t = float_tensor(name, {n});
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_float(t.data, t.dtype, size_t(i));
    return out;
  }

  // The five zero-centred norms: HF means (1 + w), mlx-community stores (1 + w) already.
  std::vector<float> norm_vector(const std::string& name, int64_t n, bool zero_centred) {
    std::vector<float> v = float_vector(name, n);
    if (zero_centred && layout_ == CheckpointLayout::HF)
      for (float& x : v) x += 1.0f;
    return v;
  }

  // Loads a matrix (or stack) named `module` + ".weight" (or `module` itself when `bare`), taking rows
  // [row_offset, row_offset + rows) of a tensor with `total_rows` rows.
  LinearWeight linear(const std::string& module, int64_t rows, int64_t cols, int64_t experts = 0, bool bare = false,
                      int64_t row_offset = 0, int64_t total_rows = -1) {
    if (total_rows < 0) total_rows = rows;
    LinearWeight w;
    w.name = module;
    w.experts = experts;
    w.rows = rows;
    w.cols = cols;
    std::string wname = bare ? module : module + ".weight";
    const TensorView& t = ck_.take(wname);
    std::vector<int64_t> lead;
    if (experts) lead.push_back(experts);
    auto with = [&](int64_t last) {
      std::vector<int64_t> s = lead;
      s.push_back(total_rows);
      s.push_back(last);
      return s;
    };
    const int64_t n_mats = experts ? experts : 1;
    if (ck_.has(module + ".scales")) {
      const TensorView& s = ck_.take(module + ".scales");
      if (!ck_.has(module + ".biases"))
        fail(s.file, ": tensor '", module, ".scales' has no matching '", module, ".biases' (affine quantization)");
      const TensorView& b = ck_.take(module + ".biases");
      if (t.dtype != DType::U32)
        fail(t.file, ": tensor '", wname, "' is quantized (has .scales) but its dtype is ", dtype_name(t.dtype),
             "; expected U32");
      if (!is_float_dtype(s.dtype) || s.dtype != b.dtype)
        fail(s.file, ": tensor '", module, ".scales' and '.biases' must share a float dtype");
      if (t.shape.size() != lead.size() + 2 || s.shape.size() != lead.size() + 2 || b.shape != s.shape)
        fail(t.file, ": tensor '", wname, "' has shape ", t.shape_str(), " with scales ", s.shape_str(),
             "; expected ", lead.size() + 2, " dimensions");
      int64_t packed = t.shape.back(), groups = s.shape.back();
      if (packed <= 0 || groups <= 0 || (packed * 32) % cols != 0 || cols % groups != 0)
        fail(t.file, ": tensor '", wname, "' with ", packed, " packed words and ", groups,
             " groups per row does not fit ", cols, " input columns");
      w.bits = int(packed * 32 / cols);
      w.group_size = int(cols / groups);
      if (w.bits != 4 && w.bits != 8)
        fail(t.file, ": tensor '", wname, "' is ", w.bits, "-bit; only 4- and 8-bit MLX quantization is supported");
      if (w.group_size % 8 != 0) fail(t.file, ": tensor '", wname, "' has group size ", w.group_size, " (must be a multiple of 8)");
      // Cross-check with the config's quantization entry for this module, when there is one.
      QuantSpec spec = c_.quant_default;
      auto ov = c_.quant_overrides.find(module);
      if (ov != c_.quant_overrides.end()) spec = ov->second;
      if (spec.bits && cols % spec.group_size != 0)
        fail(ck_.dir(), "/config.json: quantization group size ", spec.group_size, " does not divide the ", cols,
             " input columns of '", module, "'");
      if (spec.bits && (spec.bits != w.bits || spec.group_size != w.group_size))
        fail(t.file, ": tensor '", wname, "' is stored as ", w.bits, "-bit with group size ", w.group_size,
             " but config.json quantization says ", spec.bits, "-bit with group size ", spec.group_size);
      if (t.shape != with(packed)) bad_shape(t, with(cols * w.bits / 32));
      if (s.shape != with(groups)) bad_shape(s, with(cols / w.group_size));
      w.dtype = DType::U32;
      w.scale_dtype = s.dtype;
      for (int64_t e = 0; e < n_mats; ++e) {
        w.data.push_back(t.data + size_t(e * total_rows + row_offset) * w.row_bytes());
        w.scales.push_back(s.data + size_t(e * total_rows + row_offset) * w.scale_row_bytes());
        w.biases.push_back(b.data + size_t(e * total_rows + row_offset) * w.scale_row_bytes());
      }
    } else {
      if (ck_.has(module + ".biases"))
        fail(t.file, ": tensor '", module, ".biases' has no matching '", module, ".scales'");
      if (!is_float_dtype(t.dtype))
        fail(t.file, ": tensor '", wname, "' has dtype ", dtype_name(t.dtype),
             "; expected F32, F16 or BF16 (or U32 with .scales and .biases)");
      if (t.shape != with(cols)) bad_shape(t, with(cols));
      w.dtype = t.dtype;
      for (int64_t e = 0; e < n_mats; ++e) w.data.push_back(t.data + size_t(e * total_rows + row_offset) * w.row_bytes());
    }
    return w;
  }

  void resolve_deltanet(const std::string& p, DeltaNetWeights& d) {
    const int H = c_.hidden_size, C = c_.conv_dim(), K = c_.conv_kernel, Hv = c_.linear_value_heads;
    d.in_qkv = linear(p + "in_proj_qkv", C, H);
    d.in_z = linear(p + "in_proj_z", c_.value_dim(), H);
    d.in_b = linear(p + "in_proj_b", Hv, H);
    d.in_a = linear(p + "in_proj_a", Hv, H);
    d.out = linear(p + "out_proj", H, c_.value_dim());
    // conv taps to [C, K] whatever the stored layout ([C,1,K] and [C,K,1] are the same bytes).
    const TensorView& cw = ck_.take(p + "conv1d.weight");
    std::vector<int64_t> want = layout_ == CheckpointLayout::HF ? std::vector<int64_t>{C, 1, K} : std::vector<int64_t>{C, K, 1};
    if (!is_float_dtype(cw.dtype)) fail(cw.file, ": tensor '", cw.name, "' has dtype ", dtype_name(cw.dtype), "; expected a float type");
    if (cw.shape != want) bad_shape(cw, want);
    d.conv.resize(size_t(C) * K);
    for (size_t i = 0; i < d.conv.size(); ++i) d.conv[i] = load_float(cw.data, cw.dtype, i);
    d.A_log = float_vector(p + "A_log", Hv);
    d.dt_bias = float_vector(p + "dt_bias", Hv);
    d.norm = float_vector(p + "norm.weight", c_.linear_value_dim);
  }

  void resolve_attention(const std::string& p, AttentionWeights& a) {
    const int H = c_.hidden_size, D = c_.head_dim;
    a.q = linear(p + "q_proj", int64_t(c_.num_heads) * D * (c_.attn_output_gate ? 2 : 1), H);
    a.k = linear(p + "k_proj", int64_t(c_.num_kv_heads) * D, H);
    a.v = linear(p + "v_proj", int64_t(c_.num_kv_heads) * D, H);
    a.o = linear(p + "o_proj", H, int64_t(c_.num_heads) * D);
    a.q_norm = norm_vector(p + "q_norm.weight", D, true);
    a.k_norm = norm_vector(p + "k_norm.weight", D, true);
  }

  void resolve_moe(const std::string& p, MoEWeights& m) {
    const int H = c_.hidden_size, E = c_.num_experts, I = c_.expert_intermediate, S = c_.shared_intermediate;
    m.router = linear(p + "gate", E, H);
    if (ck_.has(p + "experts.gate_up_proj")) {  // HF: fused [E, 2I, H], gate rows first
      m.gate = linear(p + "experts.gate_up_proj", I, H, E, true, 0, 2 * I);
      m.up = linear(p + "experts.gate_up_proj", I, H, E, true, I, 2 * I);
      m.down = linear(p + "experts.down_proj", H, I, E, true);
    } else if (ck_.has(p + "switch_mlp.gate_proj.weight")) {  // mlx-community: stacked
      m.gate = linear(p + "switch_mlp.gate_proj", I, H, E);
      m.up = linear(p + "switch_mlp.up_proj", I, H, E);
      m.down = linear(p + "switch_mlp.down_proj", H, I, E);
    } else if (ck_.has(p + "experts.0.gate_proj.weight")) {  // one module per expert
      m.gate = per_expert(p, "gate_proj", I, H);
      m.up = per_expert(p, "up_proj", I, H);
      m.down = per_expert(p, "down_proj", H, I);
    } else {
      fail(ck_.dir(), ": no routed expert tensors found under '", p,
           "' (looked for experts.gate_up_proj, switch_mlp.gate_proj.weight and experts.0.gate_proj.weight)");
    }
    m.shared_gate = linear(p + "shared_expert.gate_proj", S, H);
    m.shared_up = linear(p + "shared_expert.up_proj", S, H);
    m.shared_down = linear(p + "shared_expert.down_proj", H, S);
    m.shared_expert_gate = linear(p + "shared_expert_gate", 1, H);
  }

  void resolve_mlp(const std::string& p, MlpWeights& m) {
    const int H = c_.hidden_size, I = c_.mlp_intermediate;
    m.gate = linear(p + "gate_proj", I, H);
    m.up = linear(p + "up_proj", I, H);
    m.down = linear(p + "down_proj", H, I);
  }

  LinearWeight per_expert(const std::string& p, const char* proj, int64_t rows, int64_t cols) {
    LinearWeight stack;
    for (int e = 0; e < c_.num_experts; ++e) {
      LinearWeight one = linear(p + "experts." + std::to_string(e) + "." + proj, rows, cols);
      if (e == 0) {
        stack = one;
        stack.name = p + "experts.*." + proj;
        stack.experts = c_.num_experts;
        continue;
      }
      if (one.dtype != stack.dtype || one.bits != stack.bits || one.group_size != stack.group_size ||
          one.scale_dtype != stack.scale_dtype)
        fail(ck_.dir(), ": expert ", e, " of '", p, "experts' is stored differently from expert 0 (", proj, ")");
      stack.data.push_back(one.data[0]);
      if (one.quantized()) {
        stack.scales.push_back(one.scales[0]);
        stack.biases.push_back(one.biases[0]);
      }
    }
    return stack;
  }
};

}  // namespace

ModelWeights resolve_weights(const ModelConfig& config, Checkpoint& checkpoint) {
  return Resolver(config, checkpoint).run();
}

}  // namespace moelens
