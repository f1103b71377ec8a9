// The model's weights as found in the checkpoint, resolved to one naming- and layout-independent
// description (HF or mlx-community names, fused or stacked experts, dense or MLX-quantized).
// Matrices stay in the mapped file; small vectors (norms, conv taps, gates) are converted to float
// here, with the norm convention already applied (HF stores w and means 1+w).
#pragma once

#include <string>
#include <vector>

#include "checkpoint.h"
#include "config.h"
#include "dtype.h"

namespace moelens {

// A matrix [rows, cols] (y = W x), or a stack of `experts` such matrices, as stored.
// Quantized weights use MLX affine quantization: w = scale * q + bias per group of `group_size`
// consecutive input columns, q packed least-significant first into uint32 words.
struct LinearWeight {
  std::string name;
  int64_t experts = 0;  // 0: one matrix
  int64_t rows = 0, cols = 0;
  DType dtype = DType::F32;  // F32 / F16 / BF16 when dense; U32 when quantized
  int bits = 0;              // 4 or 8 when quantized
  int group_size = 0;
  DType scale_dtype = DType::BF16;
  // One pointer per expert (or one): row 0 of this matrix.
  std::vector<const uint8_t*> data, scales, biases;

  bool quantized() const { return bits != 0; }
  size_t row_bytes() const { return quantized() ? size_t(cols) * bits / 8 : size_t(cols) * dtype_size(dtype); }
  size_t groups_per_row() const { return quantized() ? size_t(cols / group_size) : 0; }
  size_t scale_row_bytes() const { return groups_per_row() * dtype_size(scale_dtype); }
  size_t bytes() const;  // storage of all experts, scales and biases included
};

struct DeltaNetWeights {
  LinearWeight in_qkv, in_z, in_b, in_a, out;
  std::vector<float> conv;  // [conv_dim, kernel]; tap kernel-1 multiplies the current token
  std::vector<float> A_log, dt_bias;  // [value_heads]
  std::vector<float> norm;            // [value_dim per head], plain weight
};

struct AttentionWeights {
  LinearWeight q, k, v, o;          // q has 2*head_dim rows per head (query, gate) when gated
  std::vector<float> q_norm, k_norm;  // [head_dim], effective (1+w applied)
};

struct MoEWeights {
  LinearWeight router;                        // [experts, hidden]
  LinearWeight gate, up, down;                // stacks over experts
  LinearWeight shared_gate, shared_up, shared_down;
  LinearWeight shared_expert_gate;            // [1, hidden]
};

struct MlpWeights {
  LinearWeight gate, up, down;  // SwiGLU: down(silu(gate x) * up x)
};

struct LayerWeights {
  LayerKind kind;
  std::vector<float> input_norm, post_norm;  // effective weights
  DeltaNetWeights deltanet;
  AttentionWeights attention;
  MoEWeights moe;  // qwen3_5_moe
  MlpWeights mlp;  // qwen3_5 (config.mlp_intermediate > 0)
};

enum class CheckpointLayout { HF, MLX };

struct ModelWeights {
  CheckpointLayout layout;      // by the norm convention (conv1d layout), docs/model.md §4.3
  std::string prefix;           // of the text model's tensors, e.g. "model.language_model."
  LinearWeight embed, lm_head;  // [vocab, hidden]
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
};

// Resolves every tensor the config needs, checks dtypes and shapes against the config, and fails on any
// tensor left over (the vision tower and MTP head excepted).
ModelWeights resolve_weights(const ModelConfig& config, Checkpoint& checkpoint);

}  // namespace moelens
