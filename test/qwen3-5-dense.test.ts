// The dense hybrid qwen3_5 (t4 fixture, both layouts): loading, its hook points on the CPU backend and
// the GPU emulator, its MLP against a hand computation from the stored weights, and the whole model
// against the same weights run as a qwen3_5_moe with one expert of weight 1 and a zero shared expert.
// Parity with transformers runs in parity.test.ts once scripts/reference has written t4's references.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { disableExperts, load, type Model } from "moelens";
import { safetensorsBytes, type RawTensor } from "./helpers/checkpoint-writer";
import { fixturesDir } from "./helpers/fixtures";
import { maxAbsDiff, std } from "./helpers/safetensors";

const dir = path.join(fixturesDir, "t4");
const prompt = Array.from({ length: 20 }, (_, i) => (i * 37 + 5) % 512);

// Every tensor of a single-file checkpoint, as stored.
function readRaw(file: string): Map<string, RawTensor> {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8")) as Record<string, { dtype: RawTensor["dtype"]; shape: number[]; data_offsets: [number, number] }>;
  const out = new Map<string, RawTensor>();
  for (const [name, e] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    out.set(name, { dtype: e.dtype, shape: e.shape, data: new Uint8Array(buf.subarray(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1])) });
  }
  return out;
}

function bf16ToF32(t: RawTensor): Float32Array {
  expect(t.dtype).toBe("BF16");
  const u16 = new Uint16Array(t.data.buffer, t.data.byteOffset, t.data.byteLength / 2);
  const u32 = new Uint32Array(u16.length);
  for (let i = 0; i < u16.length; i++) u32[i] = u16[i] << 16;
  return new Float32Array(u32.buffer);
}

const zeros = (shape: number[]): RawTensor => ({ dtype: "BF16", shape, data: new Uint8Array(shape.reduce((a, b) => a * b, 2)) });
const concat = (a: Uint8Array, b: Uint8Array) => {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
};

// The dense checkpoint rewritten as qwen3_5_moe: one expert holding the MLP (its router gives it
// probability 1, hence weight 1) and a shared expert whose weights are 0.
function asOneExpertMoe(target: string): void {
  const config = JSON.parse(fs.readFileSync(path.join(dir, "hf", "config.json"), "utf8"));
  const I = config.intermediate_size;
  const H = config.hidden_size;
  delete config.intermediate_size;
  delete config.architectures;
  Object.assign(config, { model_type: "qwen3_5_moe_text", num_experts: 1, num_experts_per_tok: 1, moe_intermediate_size: I, shared_expert_intermediate_size: 8 });
  const dense = readRaw(path.join(dir, "hf", "model.safetensors"));
  const out = new Map<string, RawTensor>();
  for (const [name, t] of dense) {
    const mlp = /^(model\.layers\.\d+\.mlp\.)(gate_proj|up_proj|down_proj)\.weight$/.exec(name);
    if (!mlp) {
      out.set(name, t);
      continue;
    }
    const p = mlp[1];
    if (mlp[2] === "down_proj") {
      out.set(p + "experts.down_proj", { ...t, shape: [1, H, I] });
      continue;
    }
    if (mlp[2] === "up_proj") continue;
    const up = dense.get(p + "up_proj.weight")!;
    out.set(p + "experts.gate_up_proj", { dtype: "BF16", shape: [1, 2 * I, H], data: concat(t.data, up.data) });
    out.set(p + "gate.weight", zeros([1, H]));
    out.set(p + "shared_expert.gate_proj.weight", zeros([8, H]));
    out.set(p + "shared_expert.up_proj.weight", zeros([8, H]));
    out.set(p + "shared_expert.down_proj.weight", zeros([H, 8]));
    out.set(p + "shared_expert_gate.weight", zeros([1, H]));
  }
  fs.mkdirSync(target, { recursive: true });
  fs.writeFileSync(path.join(target, "config.json"), JSON.stringify(config));
  fs.writeFileSync(path.join(target, "model.safetensors"), safetensorsBytes(out));
}

let hf: Model;
let tmp: string;
beforeAll(async () => {
  hf = await load(path.join(dir, "hf"));
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-dense-"));
});
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe("qwen3_5 (dense)", () => {
  test("loads in both layouts with its config, and lists an MLP where qwen3_5_moe has experts", async () => {
    const mlx = await load(path.join(dir, "mlx"));
    for (const m of [hf, mlx]) {
      expect(m.config.modelType).toBe("qwen3_5_text");
      expect(m.config.numExperts).toBe(0);
      const names = m.hookPoints().map((p) => p.name);
      expect(names).toContain("blocks.2.mlp.out");
      expect(names.some((n) => n.includes(".moe."))).toBe(false);
    }
    expect(mlx.info.layout).toBe("mlx");
    expect(mlx.info.quantized).toBe(true);
  });

  for (const backend of ["cpu", "emulator"] as const) {
    test(`every hook point is captured on the ${backend} backend with its documented shape`, async () => {
      const m = backend === "cpu" ? hf : await load(path.join(dir, "hf"), { backend, precision: "fp32" });  // the exact kernels: values compared below
      const s = m.session();
      await s.prefill(prompt.slice(0, 4));
      const points = m.hookPoints();
      const r = await s.prefill(prompt.slice(4), { capture: points.map((p) => p.name) });
      for (const p of points) {
        const want = p.shape.map((d) => (d === "n" ? prompt.length - 4 : d === "context" ? prompt.length : d));
        expect(r.cache.get(p.name).shape, p.name).toEqual(want);
      }
      if (backend !== "cpu") {
        const c = await hf.session().prefill(prompt, { capture: ["blocks.3.resid_post"] });
        const g = await m.session().prefill(prompt, { capture: ["blocks.3.resid_post"] });
        const ref = c.cache.get("blocks.3.resid_post").data;
        expect(maxAbsDiff(g.cache.get("blocks.3.resid_post").data, ref)).toBeLessThan(1e-4 * Math.max(...Array.from(ref, Math.abs)));
        m.dispose();
      }
    });
  }

  test("the MLP output is down(silu(gate x) * up x) of the normed residual, computed by hand", async () => {
    const r = await hf.session().prefill(prompt.slice(0, 3), { capture: ["blocks.1.resid_mid", "blocks.1.mlp.out"] });
    const w = readRaw(path.join(dir, "hf", "model.safetensors"));
    const f = (n: string) => bf16ToF32(w.get(`model.layers.1.${n}`)!);
    const [norm, gate, up, down] = [f("post_attention_layernorm.weight"), f("mlp.gate_proj.weight"), f("mlp.up_proj.weight"), f("mlp.down_proj.weight")];
    const H = hf.config.hiddenSize, I = gate.length / H;
    const mid = r.cache.get("blocks.1.resid_mid"), out = r.cache.get("blocks.1.mlp.out");
    for (let t = 0; t < 3; t++) {
      const h = Array.from(mid.index(t).data);
      const rms = Math.sqrt(h.reduce((a, v) => a + v * v, 0) / H + 1e-6);
      const x = Array.from(h, (v, i) => (v / rms) * (1 + norm[i])); // HF stores zero-centred norms
      const act = new Float64Array(I);
      for (let j = 0; j < I; j++) {
        let g = 0, u = 0;
        for (let i = 0; i < H; i++) (g += gate[j * H + i] * x[i]), (u += up[j * H + i] * x[i]);
        act[j] = (g / (1 + Math.exp(-g))) * u;
      }
      const want = new Float32Array(H);
      for (let i = 0; i < H; i++) for (let j = 0; j < I; j++) want[i] += down[i * I + j] * act[j];
      expect(maxAbsDiff(out.index(t).data, want), `token ${t}`).toBeLessThan(1e-4 * std(want) + 1e-6);
    }
  });

  test("equals the same weights run as a qwen3_5_moe with one expert (prefill and decode)", async () => {
    asOneExpertMoe(path.join(tmp, "moe"));
    const moe = await load(path.join(tmp, "moe"));
    expect(moe.config.modelType).toBe("qwen3_5_moe_text");
    const [a, b] = [hf.session(), moe.session()];
    const ra = await a.prefill(prompt, { logits: "all" });
    const rb = await b.prefill(prompt, { logits: "all" });
    expect(maxAbsDiff(ra.logits.data, rb.logits.data)).toBeLessThanOrEqual(1e-5 * std(rb.logits.data));
    for (const token of [7, 300, 42]) {
      const [da, db] = [await a.decode(token), await b.decode(token)];
      expect(maxAbsDiff(da.logits.data, db.logits.data)).toBeLessThanOrEqual(1e-5 * std(db.logits.data));
    }
  });

  test("router interventions and router captures are refused: the model has no experts", async () => {
    const s = hf.session();
    await expect(s.prefill(prompt, { interventions: [disableExperts(0, [0])] })).rejects.toThrow(/layer 0 has no mixture of experts/);
    await expect(s.prefill(prompt, { capture: ["router"] })).rejects.toThrow(/moe\.router_logits' names no hook point/);
    expect(s.position).toBe(0);
  });
});
