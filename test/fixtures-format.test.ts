// The committed fixtures are complete and self-consistent, independently of the engine: every
// checkpoint holds exactly the tensors its config implies (HF or mlx-community names, shapes, dtypes,
// MLX bit widths and group sizes from config `quantization`), and every reference file has the shapes
// scripts/reference documents. A truncated copy, a Git LFS pointer or a stale regeneration fails here
// with the file and tensor named, rather than as a numeric mismatch in parity.test.ts.
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, test } from "vitest";
import { fixturesDir } from "./helpers/fixtures";
import { readSafetensors, type RefTensor } from "./helpers/safetensors";
import { DTYPE_BYTES } from "./helpers/checkpoint-writer";

interface HeaderEntry {
  dtype: string;
  shape: number[];
}


// Tensor names, dtypes and shapes of one safetensors file, with its offsets checked.
function readHeader(file: string): Map<string, HeaderEntry> {
  const fd = fs.openSync(file, "r");
  try {
    const size = fs.fstatSync(fd).size;
    const lenBuf = Buffer.alloc(8);
    fs.readSync(fd, lenBuf, 0, 8, 0);
    const n = Number(lenBuf.readBigUInt64LE(0));
    if (8 + n > size) throw new Error(`${file}: header length ${n} runs past the end`);
    const json = Buffer.alloc(n);
    fs.readSync(fd, json, 0, n, 8);
    const header = JSON.parse(json.toString("utf8")) as Record<string, HeaderEntry & { data_offsets: [number, number] }>;
    const out = new Map<string, HeaderEntry>();
    const spans: [number, number][] = [];
    for (const [name, e] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const [b, end] = e.data_offsets;
      const bytes = e.shape.reduce((a, d) => a * d, 1) * (DTYPE_BYTES[e.dtype] ?? NaN);
      if (end - b !== bytes) throw new Error(`${file}: ${name} spans ${end - b} bytes, ${e.dtype}${JSON.stringify(e.shape)} needs ${bytes}`);
      spans.push([b, end]);
      out.set(name, { dtype: e.dtype, shape: e.shape });
    }
    spans.sort((x, y) => x[0] - y[0]);
    let at = 0;
    for (const [b, end] of spans) {
      if (b !== at) throw new Error(`${file}: tensor data is not contiguous at byte ${at}`);
      at = end;
    }
    if (8 + n + at !== size) throw new Error(`${file}: ${size} bytes, header describes ${8 + n + at}`);
    return out;
  } finally {
    fs.closeSync(fd);
  }
}

function checkpointTensors(dir: string): Map<string, HeaderEntry> {
  const index = path.join(dir, "model.safetensors.index.json");
  const files = fs.existsSync(index)
    ? [...new Set(Object.values(JSON.parse(fs.readFileSync(index, "utf8")).weight_map as Record<string, string>))]
    : ["model.safetensors"];
  const all = new Map<string, HeaderEntry>();
  for (const f of files) {
    for (const [name, e] of readHeader(path.join(dir, f))) {
      if (all.has(name)) throw new Error(`${dir}: ${name} is in two shards`);
      all.set(name, e);
    }
  }
  return all;
}

// Canonical (transformers Qwen3_5MoeForCausalLM, or Qwen3_5ForCausalLM for the dense qwen3_5_text)
// parameter names and shapes implied by a text config.
function expectedShapes(c: Record<string, any>): Map<string, number[]> {
  const H = c.hidden_size;
  const hd = c.head_dim;
  const keyDim = c.linear_num_key_heads * c.linear_key_head_dim;
  const valueDim = c.linear_num_value_heads * c.linear_value_head_dim;
  const convDim = 2 * keyDim + valueDim;
  const m = new Map<string, number[]>([
    ["model.embed_tokens.weight", [c.vocab_size, H]],
    ["model.norm.weight", [H]],
    ["lm_head.weight", [c.vocab_size, H]],
  ]);
  (c.layer_types as string[]).forEach((kind, i) => {
    const p = `model.layers.${i}.`;
    m.set(p + "input_layernorm.weight", [H]);
    m.set(p + "post_attention_layernorm.weight", [H]);
    if (kind === "linear_attention") {
      const a = p + "linear_attn.";
      m.set(a + "in_proj_qkv.weight", [convDim, H]);
      m.set(a + "in_proj_z.weight", [valueDim, H]);
      m.set(a + "in_proj_b.weight", [c.linear_num_value_heads, H]);
      m.set(a + "in_proj_a.weight", [c.linear_num_value_heads, H]);
      m.set(a + "conv1d.weight", [convDim, 1, c.linear_conv_kernel_dim]);
      m.set(a + "A_log", [c.linear_num_value_heads]);
      m.set(a + "dt_bias", [c.linear_num_value_heads]);
      m.set(a + "norm.weight", [c.linear_value_head_dim]);
      m.set(a + "out_proj.weight", [H, valueDim]);
    } else {
      const a = p + "self_attn.";
      m.set(a + "q_proj.weight", [c.num_attention_heads * hd * 2, H]);
      m.set(a + "k_proj.weight", [c.num_key_value_heads * hd, H]);
      m.set(a + "v_proj.weight", [c.num_key_value_heads * hd, H]);
      m.set(a + "o_proj.weight", [H, c.num_attention_heads * hd]);
      m.set(a + "q_norm.weight", [hd]);
      m.set(a + "k_norm.weight", [hd]);
    }
    const e = p + "mlp.";
    if (c.model_type === "qwen3_5_text") {
      m.set(e + "gate_proj.weight", [c.intermediate_size, H]);
      m.set(e + "up_proj.weight", [c.intermediate_size, H]);
      m.set(e + "down_proj.weight", [H, c.intermediate_size]);
      return;
    }
    m.set(e + "gate.weight", [c.num_experts, H]);
    m.set(e + "experts.gate_up_proj", [c.num_experts, 2 * c.moe_intermediate_size, H]);
    m.set(e + "experts.down_proj", [c.num_experts, H, c.moe_intermediate_size]);
    m.set(e + "shared_expert.gate_proj.weight", [c.shared_expert_intermediate_size, H]);
    m.set(e + "shared_expert.up_proj.weight", [c.shared_expert_intermediate_size, H]);
    m.set(e + "shared_expert.down_proj.weight", [H, c.shared_expert_intermediate_size]);
    m.set(e + "shared_expert_gate.weight", [1, H]);
  });
  return m;
}

// The mlx-community tensors for one canonical parameter: [name, dtype, shape] triples.
function mlxTensors(name: string, shape: number[], quant: Record<string, any>): [string, string, number[]][] {
  const module = name === "lm_head.weight" ? "language_model.lm_head" : "language_model." + name.replace(/\.weight$/, "");
  if (name.endsWith("conv1d.weight")) return [[module + ".weight", "BF16", [shape[0], shape[2], 1]]];
  if (shape.length === 1) return [[name.endsWith(".weight") ? module + ".weight" : module, "BF16", shape]];
  const quantized = (mod: string, s: number[]): [string, string, number[]][] => {
    const { bits, group_size: gs } = quant[mod] ?? quant;
    const lead = s.slice(0, -1);
    const inDim = s[s.length - 1];
    return [
      [mod + ".weight", "U32", [...lead, (inDim * bits) / 32]],
      [mod + ".scales", "BF16", [...lead, inDim / gs]],
      [mod + ".biases", "BF16", [...lead, inDim / gs]],
    ];
  };
  if (name.endsWith("experts.gate_up_proj")) {
    const base = module.replace(/experts\.gate_up_proj$/, "switch_mlp.");
    const half = [shape[0], shape[1] / 2, shape[2]];
    return [...quantized(base + "gate_proj", half), ...quantized(base + "up_proj", half)];
  }
  if (name.endsWith("experts.down_proj")) return quantized(module.replace(/experts\.down_proj$/, "switch_mlp.down_proj"), shape);
  return quantized(module, shape);
}

function hfName(name: string, multimodal: boolean): string {
  return multimodal && name.startsWith("model.") ? "model.language_model." + name.slice("model.".length) : name;
}

const folders = fs
  .readdirSync(fixturesDir)
  .filter((f) => ["hf", "mlx"].some((l) => fs.existsSync(path.join(fixturesDir, f, l, "config.json"))))
  .sort();

test("fixture folders exist", () => {
  expect(folders.length).toBeGreaterThanOrEqual(1);
});

describe.each(folders)("%s", (fixture) => {
  const dir = path.join(fixturesDir, fixture);
  const layouts = ["hf", "mlx"].filter((l) => fs.existsSync(path.join(dir, l, "config.json")));

  test.each(layouts)("%s/: the tensors are exactly those the config implies", (layout) => {
    const config = JSON.parse(fs.readFileSync(path.join(dir, layout, "config.json"), "utf8"));
    const text = config.text_config ?? config;
    expect(["qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_text"]).toContain(config.model_type);
    expect(text.layer_types).toHaveLength(text.num_hidden_layers);
    const stored = checkpointTensors(path.join(dir, layout));
    const expected = new Map<string, [string[], number[]]>();
    for (const [name, shape] of expectedShapes(text)) {
      if (layout === "hf") expected.set(hfName(name, config.text_config !== undefined), [["BF16", "F32"], shape]);
      else for (const [n, dtype, s] of mlxTensors(name, shape, config.quantization)) expected.set(n, [[dtype], s]);
    }
    for (const [name, [dtypes, shape]] of expected) {
      const e = stored.get(name);
      expect(e, `${fixture}/${layout}: missing ${name}`).toBeDefined();
      expect(dtypes, `${fixture}/${layout}: ${name} dtype`).toContain(e!.dtype);
      expect(e!.shape, `${fixture}/${layout}: ${name} shape`).toEqual(shape);
    }
    const extra = [...stored.keys()].filter((n) => !expected.has(n) && !n.startsWith("mtp."));
    expect(extra, `${fixture}/${layout}: tensors no loader would consume`).toEqual([]);
  });

  test.each(layouts.filter((l) => fs.existsSync(path.join(dir, `ref_${l}.safetensors`))))(
    "ref_%s: prompts, residual, router and greedy decode have consistent shapes",
    (layout) => {
      const config = JSON.parse(fs.readFileSync(path.join(dir, layout, "config.json"), "utf8"));
      const c = config.text_config ?? config;
      const ref = readSafetensors(path.join(dir, `ref_${layout}.safetensors`));
      const get = (k: string): RefTensor => {
        const t = ref.get(k);
        if (!t) throw new Error(`${fixture}/ref_${layout}: ${k} missing`);
        return t;
      };
      const prompts = [...ref.keys()].filter((k) => k.endsWith(".input_ids")).map((k) => k.split(".")[0]);
      expect(prompts).toContain("p0");
      const [L, V, E, K, H] = [c.num_hidden_layers, c.vocab_size, c.num_experts, c.num_experts_per_tok, c.hidden_size];
      for (const p of prompts) {
        const ids = get(`${p}.input_ids`);
        const T = ids.shape[0];
        expect(ids.data).toBeInstanceOf(Int32Array);
        expect(ids.data.every((i) => i >= 0 && i < V), `${p}.input_ids within the vocabulary`).toBe(true);
        expect(get(`${p}.logits`).shape).toEqual([T, V]);
        expect(get(`${p}.hidden`).shape).toEqual([L, T, H]);
        if (c.model_type === "qwen3_5_text") {
          expect(ref.has(`${p}.router_ids`), "a dense model has no router").toBe(false);
          continue;
        }
        expect(get(`${p}.router_logits`).shape).toEqual([L, T, E]);
        const ids3 = get(`${p}.router_ids`);
        const w = get(`${p}.router_weights`);
        expect(ids3.shape).toEqual([L, T, K]);
        expect(w.shape).toEqual([L, T, K]);
        for (let row = 0; row < L * T; row++) {
          const chosen = ids3.data.subarray(row * K, (row + 1) * K);
          expect(new Set(chosen).size, `${p} row ${row}: distinct experts`).toBe(K);
          expect(chosen.every((e) => e >= 0 && e < E)).toBe(true);
          let sum = 0;
          for (const x of w.data.subarray(row * K, (row + 1) * K)) sum += x;
          expect(sum, `${p} row ${row}: weights sum to 1`).toBeCloseTo(1, 5);
        }
      }
      const greedy = get("p0.greedy_ids");
      expect(greedy.data).toBeInstanceOf(Int32Array);
      expect(get("p0.greedy_logits").shape).toEqual([greedy.shape[0], V]);
    },
  );

  const ivLayouts = layouts.filter((l) => fs.existsSync(path.join(dir, `interventions_${l}.safetensors`)));
  test.each(ivLayouts)("interventions_%s: every edit is recorded with consistent shapes", (layout) => {
    const config = JSON.parse(fs.readFileSync(path.join(dir, layout, "config.json"), "utf8"));
    const c = config.text_config ?? config;
    const iv = readSafetensors(path.join(dir, `interventions_${layout}.safetensors`));
    const get = (k: string): RefTensor => {
      const t = iv.get(k);
      if (!t) throw new Error(`${fixture}/interventions_${layout}: ${k} missing`);
      return t;
    };
    const V = c.vocab_size;
    const T = get("ablate.input_ids").shape[0];
    expect(get("ablate.logits").shape).toEqual([T, V]);
    const layer = get("ablate.layer").data[0];
    const experts = Array.from(get("ablate.experts").data);
    const routed = get("ablate.router_ids");
    expect(routed.shape).toEqual([c.num_hidden_layers, T, c.num_experts_per_tok]);
    const inLayer = routed.data.subarray(layer * T * routed.shape[2], (layer + 1) * T * routed.shape[2]);
    expect(experts.some((e) => inLayer.includes(e)), "a disabled expert is routed to").toBe(false);
    expect(get("steer.vector").shape).toEqual([c.hidden_size]);
    expect(get("steer.logits").shape).toEqual([get("steer.input_ids").shape[0], V]);
    expect(get("patch.source_ids").shape).toEqual(get("patch.target_ids").shape);
    expect(get("patch.position").data[0]).toBeLessThan(get("patch.target_ids").shape[0]);
    expect(get("patch.logits").shape).toEqual([get("patch.target_ids").shape[0], V]);
    expect(get("shared_off.logits").shape).toEqual([get("shared_off.input_ids").shape[0], V]);
  });
});
