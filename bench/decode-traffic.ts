// Bytes a batch-1 decode step must move through memory, from a checkpoint's config.json: every
// weight the token touches (at its stored bits per weight), the DeltaNet fp32 state read and written,
// and the K/V of the context: 1.795 GB per token at zero context for Qwen3.6-35B-A3B in MLX 4-bit g64
// (docs/performance.md, "Method").

/** The parts of config.json's text config that size a decode step. */
export interface DecodeShape {
  vocab: number;
  hidden: number;
  layerTypes: ("linear_attention" | "full_attention")[];
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
  expertFfn: number;
  sharedFfn: number;
}

/** Bits per weight of each module, e.g. 4.5 for MLX affine 4-bit with group 64 (bf16 scale and bias). */
export type BitsPerWeight = (module: string) => number;

/** Bytes per decoded token, by part. All weights are counted once per token (batch 1). */
export interface DecodeTraffic {
  deltanet: number; // DeltaNet projections (qkv, z, b, a, out)
  attention: number; // q (with gate), k, v, o projections
  routedExperts: number; // experts_per_token experts' gate, up and down
  sharedExpert: number; // shared expert's gate, up and down
  router: number; // router matrix
  lmHead: number;
  small: number; // norms, conv1d, A_log, dt_bias, shared-expert gate, one embedding row
  deltanetState: number; // fp32 recurrent state, read and written
  kvPerContextToken: number; // bf16 K and V of one context token over all attention layers
}

const BF16_BITS = 16;

function need(text: Record<string, unknown>, key: string, source: string): number {
  const v = text[key];
  if (typeof v !== "number") throw new Error(`${source}: text config field '${key}' must be a number`);
  return v;
}

/** Reads the decode shape from a parsed config.json (top level or its text_config). */
export function decodeShape(configJson: Record<string, unknown>, source = "config.json"): DecodeShape {
  const text = (configJson.text_config ?? configJson) as Record<string, unknown>;
  const layers = need(text, "num_hidden_layers", source);
  const interval = typeof text.full_attention_interval === "number" ? text.full_attention_interval : 4;
  const layerTypes = Array.isArray(text.layer_types)
    ? (text.layer_types as DecodeShape["layerTypes"])
    : Array.from({ length: layers }, (_, i) => ((i + 1) % interval === 0 ? "full_attention" : "linear_attention"));
  if (layerTypes.length !== layers) throw new Error(`${source}: layer_types has ${layerTypes.length} entries, num_hidden_layers is ${layers}`);
  const hidden = need(text, "hidden_size", source);
  const heads = need(text, "num_attention_heads", source);
  return {
    vocab: need(text, "vocab_size", source),
    hidden,
    layerTypes,
    heads,
    kvHeads: need(text, "num_key_value_heads", source),
    headDim: typeof text.head_dim === "number" ? text.head_dim : hidden / heads,
    linearKeyHeads: need(text, "linear_num_key_heads", source),
    linearValueHeads: need(text, "linear_num_value_heads", source),
    linearKeyDim: need(text, "linear_key_head_dim", source),
    linearValueDim: need(text, "linear_value_head_dim", source),
    convKernel: need(text, "linear_conv_kernel_dim", source),
    experts: need(text, "num_experts", source),
    expertsPerToken: need(text, "num_experts_per_tok", source),
    expertFfn: need(text, "moe_intermediate_size", source),
    sharedFfn: need(text, "shared_expert_intermediate_size", source),
  };
}

/**
 * Bits per weight from config.json's MLX `quantization` block (per-module overrides keyed by the full
 * module path, e.g. "language_model.model.layers.0.mlp.gate"): bits + 32 / group_size, the bf16 scale
 * and bias of each group included. Without a quantization block every weight is bf16.
 */
export function mlxBitsPerWeight(configJson: Record<string, unknown>): BitsPerWeight {
  const q = (configJson.quantization ?? configJson.quantization_config) as Record<string, unknown> | undefined;
  if (!q) return () => BF16_BITS;
  const bpw = (spec: Record<string, unknown>, module: string) => {
    const bits = spec.bits, group = spec.group_size;
    if (typeof bits !== "number" || typeof group !== "number") throw new Error(`config.json: quantization for ${module} needs numeric bits and group_size`);
    return bits + (2 * BF16_BITS) / group;
  };
  return (module) => {
    const full = module === "lm_head" ? "language_model.lm_head" : `language_model.model.${module}`;
    const override = q[full];
    return bpw(typeof override === "object" && override !== null ? (override as Record<string, unknown>) : q, full);
  };
}

/** Bytes per decoded token by part; `bits` gives each matrix's bits per weight (vectors are bf16). */
export function decodeTraffic(shape: DecodeShape, bits: BitsPerWeight): DecodeTraffic {
  const H = shape.hidden;
  const bytes = (params: number, module: string) => (params * bits(module)) / 8;
  const vectorBytes = (params: number) => (params * BF16_BITS) / 8;
  const keyDim = shape.linearKeyHeads * shape.linearKeyDim;
  const valueDim = shape.linearValueHeads * shape.linearValueDim;
  const convDim = 2 * keyDim + valueDim;
  const t: DecodeTraffic = {
    deltanet: 0, attention: 0, routedExperts: 0, sharedExpert: 0, router: 0,
    lmHead: bytes(shape.vocab * H, "lm_head"),
    small: bytes(H, "embed_tokens") + vectorBytes(H), // one embedding row, final norm
    deltanetState: 0, kvPerContextToken: 0,
  };
  shape.layerTypes.forEach((type, i) => {
    const L = `layers.${i}.`;
    if (type === "linear_attention") {
      const a = `${L}linear_attn.`;
      t.deltanet += bytes(convDim * H, a + "in_proj_qkv") + bytes(valueDim * H, a + "in_proj_z") +
        bytes(shape.linearValueHeads * H, a + "in_proj_b") + bytes(shape.linearValueHeads * H, a + "in_proj_a") +
        bytes(H * valueDim, a + "out_proj");
      t.small += vectorBytes(convDim * shape.convKernel + 2 * shape.linearValueHeads + shape.linearValueDim);
      t.deltanetState += 2 * 4 * shape.linearValueHeads * shape.linearKeyDim * shape.linearValueDim;
    } else {
      const a = `${L}self_attn.`;
      const qOut = 2 * shape.heads * shape.headDim, kvOut = shape.kvHeads * shape.headDim;
      t.attention += bytes(qOut * H, a + "q_proj") + bytes(kvOut * H, a + "k_proj") + bytes(kvOut * H, a + "v_proj") +
        bytes(H * shape.heads * shape.headDim, a + "o_proj");
      t.small += vectorBytes(2 * shape.headDim);
      t.kvPerContextToken += 2 * kvOut * 2; // K and V, bf16
    }
    const m = `${L}mlp.`;
    t.routedExperts += shape.expertsPerToken * (bytes(shape.expertFfn * H, m + "switch_mlp.gate_proj") +
      bytes(shape.expertFfn * H, m + "switch_mlp.up_proj") + bytes(H * shape.expertFfn, m + "switch_mlp.down_proj"));
    t.sharedExpert += bytes(shape.sharedFfn * H, m + "shared_expert.gate_proj") +
      bytes(shape.sharedFfn * H, m + "shared_expert.up_proj") + bytes(H * shape.sharedFfn, m + "shared_expert.down_proj");
    t.router += bytes(shape.experts * H, m + "gate");
    t.small += bytes(H, m + "shared_expert_gate") + vectorBytes(2 * H); // shared gate, two layer norms
  });
  return t;
}

/** Total bytes for one decode step with `context` tokens already in the KV cache. */
export function decodeBytesPerToken(t: DecodeTraffic, context = 0): number {
  return t.deltanet + t.attention + t.routedExperts + t.sharedExpert + t.router + t.lmHead + t.small +
    t.deltanetState + context * t.kvPerContextToken;
}
