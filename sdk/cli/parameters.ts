// Parameter count and per-session memory of a qwen3_5_moe text model, from its config
// (the shapes of docs/checkpoints.md; every layer has the MoE FFN, q_proj has the output gate).
import type { ModelConfig } from "../config";

export interface ParameterCount {
  total: number;
  /** Embedding table (a lookup, not a matmul). */
  embedding: number;
  /** Weights a token goes through: all but the embedding table and the experts it was not routed to. */
  activePerToken: number;
}

export function countParameters(c: ModelConfig): ParameterCount {
  const H = c.hiddenSize;
  const keyDim = c.linearKeyHeads * c.linearKeyDim;
  const valueDim = c.linearValueHeads * c.linearValueDim;
  const convDim = 2 * keyDim + valueDim;
  const deltanet =
    convDim * H + // in_proj_qkv
    valueDim * H + // in_proj_z
    2 * c.linearValueHeads * H + // in_proj_b, in_proj_a
    convDim * c.convKernel + // conv1d
    2 * c.linearValueHeads + // A_log, dt_bias
    c.linearValueDim + // gated norm
    H * valueDim; // out_proj
  const attention =
    2 * c.numHeads * c.headDim * H + // q_proj (query + gate)
    2 * c.numKvHeads * c.headDim * H + // k_proj, v_proj
    H * c.numHeads * c.headDim + // o_proj
    2 * c.headDim; // q_norm, k_norm
  const expert = 3 * c.expertIntermediate * H;
  const moeShared = c.numExperts * H + 3 * c.sharedIntermediate * H + H; // router, shared expert, its gate
  let total = 0;
  let unusedExperts = 0;
  for (const kind of c.layerTypes) {
    total += 2 * H + (kind === "full_attention" ? attention : deltanet) + c.numExperts * expert + moeShared;
    unusedExperts += (c.numExperts - c.expertsPerToken) * expert;
  }
  const embedding = c.vocabSize * H;
  total += embedding + c.vocabSize * H + H; // embed_tokens, lm_head, final norm
  return { total, embedding, activePerToken: total - embedding - unusedExperts };
}

export interface StateMemory {
  /** Bytes of KV cache each token adds (fp32, attention layers only). */
  kvBytesPerToken: number;
  /** Bytes of fixed DeltaNet state (recurrent state and conv window, fp32) per session. */
  deltanetBytes: number;
}

export function stateMemory(c: ModelConfig): StateMemory {
  const attentionLayers = c.layerTypes.filter((t) => t === "full_attention").length;
  const deltanetLayers = c.layerTypes.length - attentionLayers;
  const convDim = 2 * c.linearKeyHeads * c.linearKeyDim + c.linearValueHeads * c.linearValueDim;
  return {
    kvBytesPerToken: attentionLayers * 2 * c.numKvHeads * c.headDim * 4,
    deltanetBytes:
      deltanetLayers * (c.linearValueHeads * c.linearKeyDim * c.linearValueDim + (c.convKernel - 1) * convDim) * 4,
  };
}
