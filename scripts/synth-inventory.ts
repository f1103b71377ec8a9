// The tensor inventory and config files of a synthetic mlx-community (MLX affine 4-bit) qwen3_5_moe
// checkpoint: every tensor's name, dtype, shape and how its random values are drawn, in file order.
// The writer (scripts/synth-writer.ts) and the tests both read this, so it is the one place that
// says what "the exact mlx-community layout of Qwen3.6-35B-A3B" is (docs/model.md §1, §2.2, §4).

export interface SynthPreset {
  name: string;
  vocab: number;
  hidden: number;
  layers: number;
  fullAttentionInterval: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  linearKeyHeads: number;
  linearValueHeads: number;
  linearKeyDim: number;
  linearValueDim: number;
  convKernel: number;
  experts: number;
  expertsPerToken: number;
  expertIntermediate: number;
  sharedIntermediate: number;
  maxPositions: number;
  mropeSection: number[];
  /** Id of <|endoftext|>; the other special ids follow it in the published order (docs/model.md §5). */
  endOfTextId: number;
  /** A new shard starts when the next tensor would take the current one past this (mlx: 5 GiB). */
  shardBytes: number;
}

export const PRESETS: Record<string, SynthPreset> = {
  "qwen3.6-35b-a3b": {
    name: "qwen3.6-35b-a3b",
    vocab: 248320,
    hidden: 2048,
    layers: 40,
    fullAttentionInterval: 4,
    heads: 16,
    kvHeads: 2,
    headDim: 256,
    linearKeyHeads: 16,
    linearValueHeads: 32,
    linearKeyDim: 128,
    linearValueDim: 128,
    convKernel: 4,
    experts: 256,
    expertsPerToken: 8,
    expertIntermediate: 512,
    sharedIntermediate: 512,
    maxPositions: 262144,
    mropeSection: [11, 11, 10],
    endOfTextId: 248044,
    shardBytes: 5 * 2 ** 30,
  },
  // Same writer, names and quantization with small sizes (every input dim a multiple of the group
  // size 64), and small shards so that the sharded index path is exercised too.
  tiny: {
    name: "tiny",
    vocab: 1024,
    hidden: 128,
    layers: 8,
    fullAttentionInterval: 4,
    heads: 4,
    kvHeads: 2,
    headDim: 64,
    linearKeyHeads: 2,
    linearValueHeads: 4,
    linearKeyDim: 64,
    linearValueDim: 64,
    convKernel: 4,
    experts: 16,
    expertsPerToken: 4,
    expertIntermediate: 64,
    sharedIntermediate: 64,
    maxPositions: 4096,
    mropeSection: [3, 3, 2],
    endOfTextId: 1000,
    shardBytes: 1 << 20,
  },
};

export const DEFAULT_PRESET = "qwen3.6-35b-a3b";
export const GROUP_SIZE = 64;
export const DEFAULT_BITS = 4;
/** mlx-lm's qwen3_5 quant_predicate keeps the router and the shared-expert gate at 8 bits. */
export const EIGHT_BIT_MODULES = ["mlp.gate", "mlp.shared_expert_gate"];
/** Standard deviation of every dequantized weight matrix: keeps activations O(1) through 40 layers. */
export const WEIGHT_STD = 0.02;

export type SynthDType = "U32" | "BF16";

/** How a tensor's values are drawn from its seeded random stream. */
export type Fill =
  /** Uniform random quantization codes (any bytes are valid packed codes). */
  | { kind: "codes"; bits: number }
  /** Per-group scales of `module`: ±(0.75..1.25)·WEIGHT_STD/std(codes); drawn from the module's stream. */
  | { kind: "scales"; module: string; bits: number }
  /** Per-group biases that centre the group on 0: -scale·(2^bits-1)/2, from the same stream as the scales. */
  | { kind: "biases"; module: string; bits: number }
  /** BF16 values uniform in [low, high). */
  | { kind: "uniform"; low: number; high: number }
  /** BF16 values ln(u) with u uniform in [low, high) (A_log = ln A). */
  | { kind: "log-uniform"; low: number; high: number };

export interface TensorSpec {
  name: string;
  dtype: SynthDType;
  shape: number[];
  fill: Fill;
}

export type LayerKind = "linear_attention" | "full_attention";

export function layerKind(p: SynthPreset, i: number): LayerKind {
  return (i + 1) % p.fullAttentionInterval === 0 ? "full_attention" : "linear_attention";
}

export function derived(p: SynthPreset) {
  const keyDim = p.linearKeyHeads * p.linearKeyDim;
  const valueDim = p.linearValueHeads * p.linearValueDim;
  return { keyDim, valueDim, convDim: 2 * keyDim + valueDim };
}

export function tensorBytes(t: TensorSpec): number {
  return t.shape.reduce((a, b) => a * b, 1) * (t.dtype === "U32" ? 4 : 2);
}

export function getPreset(name: string): SynthPreset {
  const p = PRESETS[name];
  if (!p) throw new Error(`unknown preset '${name}' (known: ${Object.keys(PRESETS).join(", ")})`);
  return p;
}

// An MLX quantized Linear/Embedding/SwitchLinear: weight U32 [..., out, in·bits/32], scales and biases
// BF16 [..., out, in/64] (docs/model.md §4.1).
function quantized(module: string, lead: number[], out: number, inDim: number, bits: number): TensorSpec[] {
  if (inDim % GROUP_SIZE !== 0) throw new Error(`${module}: input dim ${inDim} is not a multiple of ${GROUP_SIZE}`);
  const groups = [...lead, out, inDim / GROUP_SIZE];
  return [
    { name: `${module}.weight`, dtype: "U32", shape: [...lead, out, (inDim * bits) / 32], fill: { kind: "codes", bits } },
    { name: `${module}.scales`, dtype: "BF16", shape: groups, fill: { kind: "scales", module, bits } },
    { name: `${module}.biases`, dtype: "BF16", shape: groups, fill: { kind: "biases", module, bits } },
  ];
}

function bitsOf(module: string): number {
  return EIGHT_BIT_MODULES.some((m) => module.endsWith(`.${m}`)) ? 8 : DEFAULT_BITS;
}

function linear(module: string, out: number, inDim: number, experts?: number): TensorSpec[] {
  return quantized(module, experts ? [experts] : [], out, inDim, bitsOf(module));
}

// Norms stored as (1+w) in MLX checkpoints (and the gated norm's plain w) sit near 1.
function norm(name: string, n: number): TensorSpec {
  return { name, dtype: "BF16", shape: [n], fill: { kind: "uniform", low: 0.9, high: 1.1 } };
}

function layerTensors(p: SynthPreset, i: number): TensorSpec[] {
  const P = `language_model.model.layers.${i}.`;
  const H = p.hidden;
  const { valueDim, convDim } = derived(p);
  const Hv = p.linearValueHeads;
  const out: TensorSpec[] = [norm(P + "input_layernorm.weight", H)];
  if (layerKind(p, i) === "linear_attention") {
    const A = P + "linear_attn.";
    out.push(
      // A = exp(A_log) in [1, 16) (the HF init range): per-step decays from mild to strong.
      { name: A + "A_log", dtype: "BF16", shape: [Hv], fill: { kind: "log-uniform", low: 1, high: 16 } },
      // Depthwise conv taps, fan-in 4: the default Conv1d init bound 1/sqrt(4).
      { name: A + "conv1d.weight", dtype: "BF16", shape: [convDim, p.convKernel, 1], fill: { kind: "uniform", low: -0.5, high: 0.5 } },
      // dt_bias in [-4, 0): softplus(a + dt_bias) spans ~0.02..1, so memories of many lengths.
      { name: A + "dt_bias", dtype: "BF16", shape: [Hv], fill: { kind: "uniform", low: -4, high: 0 } },
      ...linear(A + "in_proj_a", Hv, H),
      ...linear(A + "in_proj_b", Hv, H),
      ...linear(A + "in_proj_qkv", convDim, H),
      ...linear(A + "in_proj_z", valueDim, H),
      norm(A + "norm.weight", p.linearValueDim),
      ...linear(A + "out_proj", H, valueDim),
    );
  } else {
    const S = P + "self_attn.";
    const kv = p.kvHeads * p.headDim;
    out.push(
      norm(S + "k_norm.weight", p.headDim),
      ...linear(S + "k_proj", kv, H),
      ...linear(S + "o_proj", H, p.heads * p.headDim),
      norm(S + "q_norm.weight", p.headDim),
      ...linear(S + "q_proj", 2 * p.heads * p.headDim, H), // query and output gate, interleaved per head
      ...linear(S + "v_proj", kv, H),
    );
  }
  const M = P + "mlp.";
  const E = p.experts;
  out.push(
    ...linear(M + "gate", E, H),
    ...linear(M + "shared_expert.down_proj", H, p.sharedIntermediate),
    ...linear(M + "shared_expert.gate_proj", p.sharedIntermediate, H),
    ...linear(M + "shared_expert.up_proj", p.sharedIntermediate, H),
    ...linear(M + "shared_expert_gate", 1, H),
    ...linear(M + "switch_mlp.down_proj", H, p.expertIntermediate, E),
    ...linear(M + "switch_mlp.gate_proj", p.expertIntermediate, H, E),
    ...linear(M + "switch_mlp.up_proj", p.expertIntermediate, H, E),
    norm(P + "post_attention_layernorm.weight", H),
  );
  return out;
}

/** Every tensor of the checkpoint, in file order: embedding, layers 0..n-1, final norm, lm_head. */
export function tensorInventory(p: SynthPreset): TensorSpec[] {
  const out = [...linear("language_model.model.embed_tokens", p.vocab, p.hidden)];
  for (let i = 0; i < p.layers; i++) out.push(...layerTensors(p, i));
  out.push(norm("language_model.model.norm.weight", p.hidden));
  out.push(...linear("language_model.lm_head", p.vocab, p.hidden));
  return out;
}

export interface Shard {
  file: string;
  tensors: TensorSpec[];
  bytes: number;
}

/** Splits tensors into shards the way mlx-lm/mlx-vlm's make_shards does, with their file names. */
export function planShards(tensors: TensorSpec[], maxBytes: number): Shard[] {
  const groups: TensorSpec[][] = [[]];
  let size = 0;
  for (const t of tensors) {
    const b = tensorBytes(t);
    if (size + b > maxBytes && groups[groups.length - 1].length > 0) {
      groups.push([]);
      size = 0;
    }
    groups[groups.length - 1].push(t);
    size += b;
  }
  const n = groups.length;
  const pad = (k: number) => String(k).padStart(5, "0");
  return groups.map((g, k) => ({
    file: n === 1 ? "model.safetensors" : `model-${pad(k + 1)}-of-${pad(n)}.safetensors`,
    tensors: g,
    bytes: g.reduce((a, t) => a + tensorBytes(t), 0),
  }));
}

/** Special token ids, in the published order starting at <|endoftext|> (docs/model.md §5). */
export function specialTokens(p: SynthPreset) {
  const eot = p.endOfTextId;
  return {
    endOfText: eot,
    imEnd: eot + 2,
    visionStart: eot + 9,
    visionEnd: eot + 10,
    image: eot + 12,
    video: eot + 13,
  };
}

function quantizationJson(p: SynthPreset) {
  const q: Record<string, unknown> = { group_size: GROUP_SIZE, bits: DEFAULT_BITS, mode: "affine" };
  for (let i = 0; i < p.layers; i++) {
    for (const m of EIGHT_BIT_MODULES) q[`language_model.model.layers.${i}.${m}`] = { group_size: GROUP_SIZE, bits: 8 };
  }
  return q;
}

/** config.json as mlx-community publishes it: the HF config plus `quantization` and its duplicate. */
export function configJson(p: SynthPreset) {
  const tok = specialTokens(p);
  const layerTypes = Array.from({ length: p.layers }, (_, i) => layerKind(p, i));
  const rope = {
    rope_type: "default",
    rope_theta: 10000000,
    partial_rotary_factor: 0.25,
    mrope_section: p.mropeSection,
    mrope_interleaved: true,
  };
  return {
    architectures: ["Qwen3_5MoeForConditionalGeneration"],
    model_type: "qwen3_5_moe",
    image_token_id: tok.image,
    video_token_id: tok.video,
    vision_start_token_id: tok.visionStart,
    vision_end_token_id: tok.visionEnd,
    tie_word_embeddings: false,
    text_config: {
      model_type: "qwen3_5_moe_text",
      vocab_size: p.vocab,
      hidden_size: p.hidden,
      num_hidden_layers: p.layers,
      layer_types: layerTypes,
      full_attention_interval: p.fullAttentionInterval,
      num_attention_heads: p.heads,
      num_key_value_heads: p.kvHeads,
      head_dim: p.headDim,
      attention_bias: false,
      attn_output_gate: true,
      attention_dropout: 0.0,
      linear_num_key_heads: p.linearKeyHeads,
      linear_num_value_heads: p.linearValueHeads,
      linear_key_head_dim: p.linearKeyDim,
      linear_value_head_dim: p.linearValueDim,
      linear_conv_kernel_dim: p.convKernel,
      num_experts: p.experts,
      num_experts_per_tok: p.expertsPerToken,
      moe_intermediate_size: p.expertIntermediate,
      shared_expert_intermediate_size: p.sharedIntermediate,
      hidden_act: "silu",
      rms_norm_eps: 1e-6,
      max_position_embeddings: p.maxPositions,
      rope_parameters: rope,
      partial_rotary_factor: 0.25,
      tie_word_embeddings: false,
      mamba_ssm_dtype: "float32",
      mtp_num_hidden_layers: 1,
      mtp_use_dedicated_embeddings: false,
      dtype: "bfloat16",
      bos_token_id: tok.endOfText,
      eos_token_id: tok.endOfText,
      pad_token_id: null,
      output_router_logits: false,
      router_aux_loss_coef: 0.001,
      initializer_range: 0.02,
      use_cache: true,
    },
    vision_config: {
      model_type: "qwen3_5_moe_vision",
      depth: 27,
      hidden_size: 1152,
      intermediate_size: 4304,
      num_heads: 16,
      patch_size: 16,
      temporal_patch_size: 2,
      spatial_merge_size: 2,
      in_channels: 3,
      num_position_embeddings: 2304,
      out_hidden_size: p.hidden,
      hidden_act: "gelu_pytorch_tanh",
      deepstack_visual_indexes: [],
    },
    quantization: quantizationJson(p),
    quantization_config: quantizationJson(p),
  };
}

export function generationConfigJson(p: SynthPreset) {
  const tok = specialTokens(p);
  return {
    bos_token_id: tok.endOfText,
    eos_token_id: [tok.imEnd, tok.endOfText],
    pad_token_id: tok.endOfText,
    do_sample: true,
    temperature: 1.0,
    top_k: 20,
    top_p: 0.95,
  };
}
