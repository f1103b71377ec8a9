// The model's hyper-parameters, read from a checkpoint's config.json: the Qwen3.5 hybrid family,
// `qwen3_5_moe` (mixture of experts) and `qwen3_5` (dense MLP), each with a `text_config` or as a bare
// `*_text` config. Any size of the family is accepted.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace moelens {

enum class LayerKind { DeltaNet, Attention };

struct QuantSpec {
  int bits = 0;  // 0: not quantized
  int group_size = 0;
};

struct ModelConfig {
  std::string model_type;  // as written at the top level
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  std::vector<LayerKind> layer_kinds;

  // gated attention
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  bool attn_output_gate = true;
  int rotary_dim = 0;  // head_dim * partial_rotary_factor
  double rope_theta = 10000.0;

  // Gated DeltaNet
  int linear_key_heads = 0;
  int linear_value_heads = 0;
  int linear_key_dim = 0;
  int linear_value_dim = 0;
  int conv_kernel = 0;

  // dense MLP (qwen3_5): SwiGLU of this width; 0 for a mixture of experts
  int mlp_intermediate = 0;

  // MoE (qwen3_5_moe)
  int num_experts = 0;
  int experts_per_token = 0;
  int expert_intermediate = 0;
  int shared_intermediate = 0;
  bool norm_topk_prob = true;

  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  int max_position_embeddings = 0;
  std::vector<int> eos_token_ids;

  // MLX affine quantization: the default and per-module overrides (keys are module paths).
  QuantSpec quant_default;
  std::map<std::string, QuantSpec> quant_overrides;

  int key_dim() const { return linear_key_heads * linear_key_dim; }
  int value_dim() const { return linear_value_heads * linear_value_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
  int num_deltanet_layers() const;
  int num_attention_layers() const;

  // Reads and validates `<dir>/config.json`; errors name the file and the field.
  static ModelConfig load(const std::string& dir);
  static ModelConfig parse(const std::string& text, const std::string& path);
};

}  // namespace moelens
