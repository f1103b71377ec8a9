// The synthetic mlx-community checkpoint: the full Qwen3.6-35B-A3B inventory matches docs/model.md
// §1/§4 (names, shapes, dtypes, sharding, config), and the tiny preset, written to disk by the same writer,
// has the promised headers and value ranges and loads and decodes through moelens.
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { load } from "moelens";
import {
  configJson,
  generationConfigJson,
  getPreset,
  planShards,
  tensorBytes,
  tensorInventory,
  type TensorSpec,
} from "../scripts/synth-inventory";
import { fromBf16, writeSyntheticCheckpoint } from "../scripts/synth-writer";

const byName = (specs: TensorSpec[]) => new Map(specs.map((t) => [t.name, t]));

describe("full preset (Qwen3.6-35B-A3B, mlx-community 4-bit)", () => {
  const preset = getPreset("qwen3.6-35b-a3b");
  const specs = tensorInventory(preset);
  const inv = byName(specs);
  const L = "language_model.model.layers.";

  // docs/model.md §4.2: quantized modules as [weight U32 shape, scales/biases BF16 shape].
  const quantized: [string, number[], number[]][] = [
    ["language_model.model.embed_tokens", [248320, 256], [248320, 32]],
    ["language_model.lm_head", [248320, 256], [248320, 32]],
    [L + "3.self_attn.q_proj", [8192, 256], [8192, 32]],
    [L + "3.self_attn.k_proj", [512, 256], [512, 32]],
    [L + "3.self_attn.v_proj", [512, 256], [512, 32]],
    [L + "3.self_attn.o_proj", [2048, 512], [2048, 64]],
    [L + "0.linear_attn.in_proj_qkv", [8192, 256], [8192, 32]],
    [L + "0.linear_attn.in_proj_z", [4096, 256], [4096, 32]],
    [L + "0.linear_attn.in_proj_b", [32, 256], [32, 32]],
    [L + "0.linear_attn.in_proj_a", [32, 256], [32, 32]],
    [L + "0.linear_attn.out_proj", [2048, 512], [2048, 64]],
    [L + "0.mlp.gate", [256, 512], [256, 32]], // 8-bit
    [L + "0.mlp.shared_expert_gate", [1, 512], [1, 32]], // 8-bit
    [L + "0.mlp.shared_expert.gate_proj", [512, 256], [512, 32]],
    [L + "0.mlp.shared_expert.up_proj", [512, 256], [512, 32]],
    [L + "0.mlp.shared_expert.down_proj", [2048, 64], [2048, 8]],
    [L + "0.mlp.switch_mlp.gate_proj", [256, 512, 256], [256, 512, 32]],
    [L + "0.mlp.switch_mlp.up_proj", [256, 512, 256], [256, 512, 32]],
    [L + "0.mlp.switch_mlp.down_proj", [256, 2048, 64], [256, 2048, 8]],
    [L + "39.mlp.switch_mlp.down_proj", [256, 2048, 64], [256, 2048, 8]],
  ];
  test.each(quantized)("%s", (module, weight, groups) => {
    expect(inv.get(module + ".weight")).toMatchObject({ dtype: "U32", shape: weight });
    expect(inv.get(module + ".scales")).toMatchObject({ dtype: "BF16", shape: groups });
    expect(inv.get(module + ".biases")).toMatchObject({ dtype: "BF16", shape: groups });
  });

  test("unquantized tensors are BF16 with MLX shapes (conv [C, K, 1], Qwen3.6 dtypes)", () => {
    const plain: [string, number[]][] = [
      [L + "0.linear_attn.conv1d.weight", [8192, 4, 1]],
      [L + "0.linear_attn.A_log", [32]],
      [L + "0.linear_attn.dt_bias", [32]],
      [L + "0.linear_attn.norm.weight", [128]],
      [L + "0.input_layernorm.weight", [2048]],
      [L + "0.post_attention_layernorm.weight", [2048]],
      [L + "3.self_attn.q_norm.weight", [256]],
      [L + "3.self_attn.k_norm.weight", [256]],
      ["language_model.model.norm.weight", [2048]],
    ];
    for (const [name, shape] of plain) expect(inv.get(name), name).toEqual(expect.objectContaining({ dtype: "BF16", shape }));
    expect(inv.has(L + "0.linear_attn.conv1d.scales")).toBe(false);
  });

  test("40 layers, full attention at 3, 7, ..., 39, MoE everywhere; names unique", () => {
    const attention: number[] = [];
    for (let i = 0; i < 40; i++) {
      const attn = inv.has(`${L}${i}.self_attn.q_proj.weight`);
      expect(inv.has(`${L}${i}.linear_attn.in_proj_qkv.weight`)).toBe(!attn);
      expect(inv.has(`${L}${i}.mlp.switch_mlp.gate_proj.weight`)).toBe(true);
      if (attn) attention.push(i);
    }
    expect(attention).toEqual([3, 7, 11, 15, 19, 23, 27, 31, 35, 39]);
    expect(inv.has(`${L}40.input_layernorm.weight`)).toBe(false);
    expect(inv.size).toBe(specs.length);
    // 3 (embed) + 1 (norm) + 3 (lm_head) + 30 DeltaNet layers × 45 + 10 attention layers × 40 tensors.
    expect(specs.length).toBe(7 + 30 * 45 + 10 * 40);
    expect(specs.every((t) => t.name.startsWith("language_model.model.") || t.name.startsWith("language_model.lm_head."))).toBe(true);
  });

  test("about 19.5 GB in 4 shards of at most 5 GiB, named as mlx names them", () => {
    const shards = planShards(specs, preset.shardBytes);
    const total = shards.reduce((a, s) => a + s.bytes, 0);
    expect(total).toBe(specs.reduce((a, t) => a + tensorBytes(t), 0));
    expect(total).toBeGreaterThan(19.4e9);
    expect(total).toBeLessThan(19.6e9);
    expect(shards.map((s) => s.file)).toEqual([1, 2, 3, 4].map((k) => `model-0000${k}-of-00004.safetensors`));
    for (const s of shards) expect(s.bytes).toBeLessThanOrEqual(5 * 2 ** 30);
    expect(shards.flatMap((s) => s.tensors)).toEqual(specs);
  });

  test("config.json: text_config, vision_config, token ids, per-layer 8-bit overrides (twice)", () => {
    const c = configJson(preset);
    expect(c).toMatchObject({
      architectures: ["Qwen3_5MoeForConditionalGeneration"],
      model_type: "qwen3_5_moe",
      image_token_id: 248056,
      video_token_id: 248057,
      vision_start_token_id: 248053,
      vision_end_token_id: 248054,
      tie_word_embeddings: false,
      vision_config: { model_type: "qwen3_5_moe_vision", depth: 27, hidden_size: 1152, out_hidden_size: 2048 },
    });
    expect(c.text_config).toMatchObject({
      model_type: "qwen3_5_moe_text",
      vocab_size: 248320,
      hidden_size: 2048,
      num_hidden_layers: 40,
      num_attention_heads: 16,
      num_key_value_heads: 2,
      head_dim: 256,
      linear_num_key_heads: 16,
      linear_num_value_heads: 32,
      linear_key_head_dim: 128,
      linear_value_head_dim: 128,
      num_experts: 256,
      num_experts_per_tok: 8,
      moe_intermediate_size: 512,
      shared_expert_intermediate_size: 512,
      rope_parameters: { rope_theta: 10000000, partial_rotary_factor: 0.25, mrope_section: [11, 11, 10] },
      bos_token_id: 248044,
      eos_token_id: 248044,
    });
    expect(c.text_config.layer_types.filter((t) => t === "full_attention")).toHaveLength(10);
    const q = c.quantization as Record<string, unknown>;
    expect(q).toMatchObject({ group_size: 64, bits: 4, mode: "affine" });
    const overrides = Object.keys(q).filter((k) => k.startsWith("language_model."));
    expect(overrides).toHaveLength(80);
    expect(q[L + "17.mlp.shared_expert_gate"]).toEqual({ group_size: 64, bits: 8 });
    expect(c.quantization_config).toEqual(c.quantization);
    expect(generationConfigJson(preset).eos_token_id).toEqual([248046, 248044]);
  });

  test("every quantized tensor's bits (from its shapes) agree with config.json", () => {
    const q = configJson(preset).quantization as Record<string, { bits: number; group_size: number }>;
    for (const w of specs.filter((t) => t.dtype === "U32")) {
      const module = w.name.slice(0, -".weight".length);
      const scales = inv.get(module + ".scales")!;
      const inDim = scales.shape[scales.shape.length - 1] * 64;
      const bits = (32 * w.shape[w.shape.length - 1]) / inDim;
      expect(bits, module).toBe((q[module] ?? q).bits);
    }
  });
});

// Reads a safetensors header: tensor entries in file order and where the data starts.
function readHeader(file: string) {
  const fd = fs.openSync(file, "r");
  try {
    const len = Buffer.alloc(8);
    fs.readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE());
    const json = Buffer.alloc(n);
    fs.readSync(fd, json, 0, n, 8);
    const header = JSON.parse(json.toString("utf8")) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
    const { __metadata__: metadata, ...tensors } = header as Record<string, never>;
    return { metadata: metadata as unknown, tensors: tensors as typeof header, dataStart: 8 + n };
  } finally {
    fs.closeSync(fd);
  }
}

describe("tiny preset written to disk", () => {
  const preset = getPreset("tiny");
  const specs = tensorInventory(preset);
  let dir: string;
  let files: Map<string, Buffer>; // shard file -> bytes
  let tensorFile: Map<string, string>;

  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-synth-"));
    writeSyntheticCheckpoint(dir, preset, { seed: 7 });
    const index = JSON.parse(fs.readFileSync(path.join(dir, "model.safetensors.index.json"), "utf8"));
    tensorFile = new Map(Object.entries(index.weight_map as Record<string, string>));
    files = new Map([...new Set(tensorFile.values())].map((f) => [f, fs.readFileSync(path.join(dir, f))]));
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  function tensorBytesOf(name: string): Buffer {
    const file = tensorFile.get(name)!;
    const h = readHeader(path.join(dir, file));
    const [b, e] = h.tensors[name].data_offsets;
    return files.get(file)!.subarray(h.dataStart + b, h.dataStart + e);
  }

  function bf16Values(name: string): number[] {
    const b = tensorBytesOf(name);
    return Array.from({ length: b.length / 2 }, (_, i) => fromBf16(b.readUInt16LE(2 * i)));
  }

  // w = scale·q + bias per group of 64 along the last axis, q least-significant bits first (§4.1).
  function dequantize(module: string, bits: number): number[] {
    const w = tensorBytesOf(module + ".weight");
    const s = bf16Values(module + ".scales");
    const b = bf16Values(module + ".biases");
    const perWord = 32 / bits;
    const out: number[] = [];
    for (let i = 0; i < (w.length / 4) * perWord; i++) {
      const q = (w.readUInt32LE(4 * Math.floor(i / perWord)) >>> (bits * (i % perWord))) & (2 ** bits - 1);
      const g = Math.floor(i / 64);
      out.push(s[g] * q + b[g]);
    }
    return out;
  }

  const stats = (v: number[]) => {
    const mean = v.reduce((a, x) => a + x, 0) / v.length;
    return { mean, std: Math.sqrt(v.reduce((a, x) => a + (x - mean) ** 2, 0) / v.length) };
  };

  test("shards hold exactly the inventory, in order, with contiguous offsets and MLX metadata", () => {
    const shards = planShards(specs, preset.shardBytes);
    expect(shards.length).toBeGreaterThan(1);
    expect([...files.keys()].sort()).toEqual(shards.map((s) => s.file));
    expect(tensorFile.size).toBe(specs.length);
    for (const s of shards) {
      const file = path.join(dir, s.file);
      const h = readHeader(file);
      expect(h.metadata).toEqual({ format: "mlx" });
      expect(h.dataStart % 8).toBe(0);
      let offset = 0;
      const entries = Object.entries(h.tensors);
      expect(entries.map(([n]) => n)).toEqual(s.tensors.map((t) => t.name));
      entries.forEach(([name, e], k) => {
        const t = s.tensors[k];
        expect(e).toEqual({ dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + tensorBytes(t)] });
        expect(tensorFile.get(name)).toBe(s.file);
        offset += tensorBytes(t);
      });
      expect(fs.statSync(file).size).toBe(h.dataStart + offset);
    }
    expect(JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8"))).toEqual(configJson(preset));
  });

  test("dequantized weights have std about 0.02 and mean about 0 (4-bit and 8-bit)", () => {
    for (const [module, bits] of [
      ["language_model.model.layers.0.mlp.switch_mlp.gate_proj", 4],
      ["language_model.model.embed_tokens", 4],
      ["language_model.model.layers.3.mlp.gate", 8],
    ] as const) {
      const { mean, std } = stats(dequantize(module, bits));
      expect(std, module).toBeGreaterThan(0.018);
      expect(std, module).toBeLessThan(0.022);
      expect(Math.abs(mean), module).toBeLessThan(0.002);
    }
  });

  test("norms near 1, A_log = ln A with A in [1, 16), dt_bias in [-4, 0]", () => {
    const inRange = (name: string, lo: number, hi: number) => {
      const v = bf16Values(name);
      expect(Math.min(...v), name).toBeGreaterThanOrEqual(lo);
      expect(Math.max(...v), name).toBeLessThanOrEqual(hi);
    };
    inRange("language_model.model.layers.0.input_layernorm.weight", 0.89, 1.11);
    inRange("language_model.model.layers.0.linear_attn.norm.weight", 0.89, 1.11);
    inRange("language_model.model.layers.7.self_attn.q_norm.weight", 0.89, 1.11);
    inRange("language_model.model.layers.1.linear_attn.A_log", 0, Math.log(16) * 1.01);
    inRange("language_model.model.layers.1.linear_attn.dt_bias", -4, 0);
    inRange("language_model.model.layers.2.linear_attn.conv1d.weight", -0.5, 0.5);
  });

  test("the seed decides the bytes; an existing checkpoint is only replaced on request", () => {
    const again = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-synth-"));
    try {
      const hash = (d: string) => {
        const h = crypto.createHash("sha256");
        for (const f of fs.readdirSync(d).sort()) h.update(f).update(fs.readFileSync(path.join(d, f)));
        return h.digest("hex");
      };
      writeSyntheticCheckpoint(again, preset, { seed: 7 });
      expect(hash(again)).toBe(hash(dir));
      expect(() => writeSyntheticCheckpoint(again, preset, { seed: 8 })).toThrow(/already holds a checkpoint.*--force/);
      writeSyntheticCheckpoint(again, preset, { seed: 8, replace: true });
      expect(hash(again)).not.toBe(hash(dir));
    } finally {
      fs.rmSync(again, { recursive: true, force: true });
    }
  });

  test("loads with moelens (mlx layout, quantized) and decodes tokens with finite logits", async () => {
    const model = await load(dir);
    expect(model.info).toMatchObject({ layout: "mlx", quantized: true });
    expect(model.config).toMatchObject({ numLayers: 8, vocabSize: 1024, numExperts: 16, expertsPerToken: 4 });
    const s = model.session();
    const r = await s.prefill([3, 141, 59, 265], { capture: ["router"] });
    expect(r.router!.ids.shape).toEqual([8, 4, 4]);
    let token = r.logits.argmax();
    for (let i = 0; i < 4; i++) {
      const d = await s.decode(token);
      expect(d.logits.shape).toEqual([1, 1024]);
      expect(d.logits.data.every(Number.isFinite)).toBe(true);
      expect(stats(Array.from(d.logits.data)).std).toBeGreaterThan(0.01);
      token = d.logits.argmax();
    }
    expect(s.position).toBe(8);
  });
});
