// Writes small, valid qwen3_5_moe checkpoints (HF layout, random BF16 weights) for loader tests,
// and serialises safetensors files from named tensors.
import * as fs from "node:fs";
import * as path from "node:path";

export interface RawTensor {
  dtype: "BF16" | "F32" | "F16" | "U32" | "I32";
  shape: number[];
  data: Uint8Array;
}

/** Bytes per element of each dtype these helpers write. */
export const DTYPE_BYTES: Record<string, number> = { BF16: 2, F16: 2, F32: 4, U32: 4, I32: 4 };

export function safetensorsBytes(tensors: Map<string, RawTensor>): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let offset = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.length] };
    offset += t.data.length;
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8 !== 0) json += " ";
  const headerBytes = Buffer.from(json, "utf8");
  const out = new Uint8Array(8 + headerBytes.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  let pos = 8 + headerBytes.length;
  for (const t of tensors.values()) {
    out.set(t.data, pos);
    pos += t.data.length;
  }
  return out;
}

// A seeded PRNG so that generated checkpoints (and fuzz cases) are reproducible.
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function bf16(shape: number[], rand: () => number, scale: number, offset = 0): RawTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const f = new Float32Array(n);
  for (let i = 0; i < n; i++) f[i] = offset + (rand() * 2 - 1) * scale;
  const u = new Uint32Array(f.buffer);
  const out = new Uint16Array(n);
  for (let i = 0; i < n; i++) out[i] = u[i] >>> 16;
  return { dtype: "BF16", shape, data: new Uint8Array(out.buffer) };
}

export const TINY_TEXT_CONFIG = {
  model_type: "qwen3_5_moe_text",
  vocab_size: 64,
  hidden_size: 32,
  num_hidden_layers: 2,
  layer_types: ["linear_attention", "full_attention"],
  num_attention_heads: 2,
  num_key_value_heads: 1,
  head_dim: 16,
  linear_num_key_heads: 1,
  linear_num_value_heads: 2,
  linear_key_head_dim: 8,
  linear_value_head_dim: 8,
  linear_conv_kernel_dim: 4,
  num_experts: 4,
  num_experts_per_tok: 2,
  moe_intermediate_size: 16,
  shared_expert_intermediate_size: 16,
  hidden_act: "silu",
  rms_norm_eps: 1e-6,
  max_position_embeddings: 512,
  attn_output_gate: true,
  rope_parameters: { rope_type: "default", rope_theta: 10000000.0, partial_rotary_factor: 0.25 },
  eos_token_id: [63],
};

/** The tensors of a tiny HF-layout model for TINY_TEXT_CONFIG. */
export function tinyTensors(seed = 1): Map<string, RawTensor> {
  const c = TINY_TEXT_CONFIG;
  const r = mulberry32(seed);
  const H = c.hidden_size;
  const t = new Map<string, RawTensor>();
  const p = "model.language_model.";
  t.set(`${p}embed_tokens.weight`, bf16([c.vocab_size, H], r, 0.5));
  t.set("lm_head.weight", bf16([c.vocab_size, H], r, 0.2));
  t.set(`${p}norm.weight`, bf16([H], r, 0.1));
  const keyDim = c.linear_num_key_heads * c.linear_key_head_dim;
  const valueDim = c.linear_num_value_heads * c.linear_value_head_dim;
  const convDim = 2 * keyDim + valueDim;
  const E = c.num_experts;
  const I = c.moe_intermediate_size;
  const S = c.shared_expert_intermediate_size;
  for (let l = 0; l < c.num_hidden_layers; l++) {
    const q = `${p}layers.${l}.`;
    t.set(`${q}input_layernorm.weight`, bf16([H], r, 0.1));
    t.set(`${q}post_attention_layernorm.weight`, bf16([H], r, 0.1));
    if (c.layer_types[l] === "linear_attention") {
      const a = `${q}linear_attn.`;
      t.set(`${a}in_proj_qkv.weight`, bf16([convDim, H], r, 0.2));
      t.set(`${a}in_proj_z.weight`, bf16([valueDim, H], r, 0.2));
      t.set(`${a}in_proj_b.weight`, bf16([c.linear_num_value_heads, H], r, 0.2));
      t.set(`${a}in_proj_a.weight`, bf16([c.linear_num_value_heads, H], r, 0.2));
      t.set(`${a}conv1d.weight`, bf16([convDim, 1, c.linear_conv_kernel_dim], r, 0.4));
      t.set(`${a}A_log`, bf16([c.linear_num_value_heads], r, 0.5));
      t.set(`${a}dt_bias`, bf16([c.linear_num_value_heads], r, 0.5));
      t.set(`${a}norm.weight`, bf16([c.linear_value_head_dim], r, 0.1, 1));
      t.set(`${a}out_proj.weight`, bf16([H, valueDim], r, 0.2));
    } else {
      const a = `${q}self_attn.`;
      const D = c.head_dim;
      t.set(`${a}q_proj.weight`, bf16([c.num_attention_heads * D * 2, H], r, 0.2));
      t.set(`${a}k_proj.weight`, bf16([c.num_key_value_heads * D, H], r, 0.2));
      t.set(`${a}v_proj.weight`, bf16([c.num_key_value_heads * D, H], r, 0.2));
      t.set(`${a}o_proj.weight`, bf16([H, c.num_attention_heads * D], r, 0.2));
      t.set(`${a}q_norm.weight`, bf16([D], r, 0.1));
      t.set(`${a}k_norm.weight`, bf16([D], r, 0.1));
    }
    const m = `${q}mlp.`;
    t.set(`${m}gate.weight`, bf16([E, H], r, 0.3));
    t.set(`${m}experts.gate_up_proj`, bf16([E, 2 * I, H], r, 0.2));
    t.set(`${m}experts.down_proj`, bf16([E, H, I], r, 0.2));
    t.set(`${m}shared_expert.gate_proj.weight`, bf16([S, H], r, 0.2));
    t.set(`${m}shared_expert.up_proj.weight`, bf16([S, H], r, 0.2));
    t.set(`${m}shared_expert.down_proj.weight`, bf16([H, S], r, 0.2));
    t.set(`${m}shared_expert_gate.weight`, bf16([1, H], r, 0.2));
  }
  return t;
}

/** Writes a model directory; returns its path. */
export function writeModelDir(dir: string, config: unknown, weights: Uint8Array): string {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "config.json"), typeof config === "string" ? config : JSON.stringify(config));
  fs.writeFileSync(path.join(dir, "model.safetensors"), weights);
  return dir;
}

