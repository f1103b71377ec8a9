// Hook points: the listing, capture by name and pattern on the CPU backend and the GPU emulator, edits
// and hook functions, each checked against effects computed by hand from captured values. The GPU
// checks run on the Metal host (on Linux over the emulator), or on MOELENS_TEST_GPU_BACKEND (e.g. "cuda").
import * as fs from "node:fs";
import * as path from "node:path";
import { beforeAll, describe, expect, test } from "vitest";
import { biasExperts, load, meanAblate, scaleAt, setAt, addAt, zeroAt, type ForwardResult, type HookPoint, type Model, Tensor } from "moelens";
import { fixtureCases, fixturesDir, get } from "./helpers/fixtures";
import { gpuBackend, isBuilt } from "./helpers/gpu-backend";

const t1 = fixtureCases().find((c) => c.name === "t1/mlx")!;
const prompt = Array.from(get(t1.ref, "p0.input_ids").data).slice(0, 9);
const gpuName = gpuBackend("emulator");

let model: Model;
beforeAll(async () => {
  model = await load(t1.modelDir);
});

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
  return m;
}

// The documented shape of a point for a call of n tokens starting at `start`.
function expectedShape(p: HookPoint, n: number, start: number): number[] {
  return p.shape.map((d) => (d === "n" ? n : d === "context" ? start + n : d));
}

describe("the hook point listing", () => {
  test("names every value of every layer once, in forward order, with the documented templates", () => {
    const points = model.hookPoints();
    const names = points.map((p) => p.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names[0]).toBe("embed");
    expect(names.slice(-2)).toEqual(["final_norm", "logits"]);
    const c = model.config;
    for (let l = 0; l < c.numLayers; l++) {
      const mixer = c.layerTypes[l] === "linear_attention" ? "deltanet" : "attn";
      const other = mixer === "deltanet" ? "attn" : "deltanet";
      const layer = points.filter((p) => p.layer === l).map((p) => p.name);
      expect(layer[0]).toBe(`blocks.${l}.resid_pre`);
      expect(layer.at(-1)).toBe(`blocks.${l}.resid_post`);
      expect(layer).toContain(`blocks.${l}.${mixer}.out`);
      expect(layer.some((n) => n.startsWith(`blocks.${l}.${other}.`))).toBe(false);
      expect(layer).toContain(`blocks.${l}.moe.router_probs`);
    }
    const resid = points.find((p) => p.name === "blocks.0.resid_post")!;
    expect(resid).toMatchObject({ template: "blocks.{l}.resid_post", layer: 0, dims: ["n", "hidden"], shape: ["n", c.hiddenSize] });
    const ids = points.find((p) => p.name === "blocks.0.moe.topk_ids")!;
    expect(ids).toMatchObject({ dtype: "int32", editable: false, shape: ["n", c.expertsPerToken] });
  });

  test("docs/hooks.md lists exactly the registry's hook points, shapes and meanings", async () => {
    const doc = fs.readFileSync(path.join(__dirname, "..", "docs", "hooks.md"), "utf8");
    const rows = new Map<string, string>();
    // The hook points of both architectures: qwen3_5_moe (t1) and the dense qwen3_5 (t4).
    const dense = await load(path.join(fixturesDir, "t4", "hf"));
    for (const p of [...model.hookPoints(), ...dense.hookPoints()]) {
      const shape = `[${p.dims.join(", ")}]`;
      rows.set(p.template, `| \`${p.template}\` | ${shape} | ${p.dtype} | ${p.editable ? "edit" : "read"} | ${p.meaning} |`);
    }
    const registry = doc.slice(doc.indexOf("## The registry"), doc.indexOf("## Adding a hook point"));
    const table = registry.split("\n").filter((line) => line.startsWith("| `"));
    expect(table.sort()).toEqual([...rows.values()].sort());
  });
});

// Every listed point, captured on a backend with its documented shape (the GPU backend through the emulator).
async function captureEverything(m: Model) {
  const s = m.session();
  await s.prefill(prompt.slice(0, 3));
  const points = m.hookPoints();
  const r = await s.prefill(prompt.slice(3), { capture: points.map((p) => p.name), logits: "all" });
  for (const p of points) {
    const t = r.cache.get(p.name);
    expect(t.shape, p.name).toEqual(expectedShape(p, prompt.length - 3, 3));
    expect(t.data instanceof (p.dtype === "int32" ? Int32Array : Float32Array), p.name).toBe(true);
    for (const v of t.data) if (!Number.isFinite(v)) throw new Error(`${p.name}: ${v}`);
  }
  expect(r.cache.size).toBe(points.length);
  return r;
}

describe("capture by name", () => {
  test("every hook point on the CPU backend, with its documented shape", async () => {
    const r = await captureEverything(model);
    expect(maxAbsDiff(r.cache.get("logits").data, r.logits.data)).toBe(0);
  });

  test.runIf(isBuilt(gpuName))(`every hook point on the GPU backend (${gpuName}), with its shape and the CPU's values`, async () => {
    const gpu = await load(t1.modelDir, { backend: gpuName, precision: "fp32" });  // the exact kernels: values compared below
    const [rg, rc] = [await captureEverything(gpu), await captureEverything(model)];
    for (const name of ["embed", "blocks.1.deltanet.state_norm", "blocks.3.attn.probs", "blocks.3.resid_post", "logits"]) {
      const c = rc.cache.get(name).data;
      expect(maxAbsDiff(rg.cache.get(name).data, c), name).toBeLessThanOrEqual(1e-3 * Math.max(1, maxAbs(c)));
    }
    expect(Array.from(rg.cache.get("blocks.2.moe.topk_ids").data)).toEqual(Array.from(rc.cache.get("blocks.2.moe.topk_ids").data));
    gpu.dispose();
  });

  test.runIf(isBuilt(gpuName))(`edits and hook functions act on the GPU backend (${gpuName}) as on the CPU`, async () => {
    const gpu = await load(t1.modelDir, { backend: gpuName, precision: "fp32" });
    const options = {
      logits: "all" as const,
      edits: [meanAblate("blocks.0.deltanet.head_out", { heads: [2] }), scaleAt("blocks.3.attn.out", 0.5)],
      hooks: [["blocks.1.moe.out", (v: Tensor<Float32Array>) => v.data.map((x) => -x)] as [string, (v: Tensor<Float32Array>) => Float32Array]],
    };
    const [rc, rg] = [await model.session().prefill(prompt, options), await gpu.session().prefill(prompt, options)];
    expect(maxAbsDiff(rg.logits.data, rc.logits.data)).toBeLessThan(1e-3 * maxAbs(rc.logits.data));
    const plain = await model.session().prefill(prompt, { logits: "all" });
    expect(maxAbsDiff(plain.logits.data, rc.logits.data)).toBeGreaterThan(1e-2 * maxAbs(rc.logits.data));
    gpu.dispose();
  });

  test.runIf(isBuilt(gpuName))(`edited keys and values reach the fp16 KV cache of the GPU backend (${gpuName})`, async () => {
    // At fp16 the GPU's cache holds halves, written once the hook points have seen (and here edited) k
    // and v. Key j of layer 3 is set to a_j · K, so that the next token's scores are a_j (q · K) / sqrt(D):
    // its head output, computed here from its captured q and gate and the captured values, holds only if
    // the edited keys and the values reached the cache.
    const gpu = await load(t1.modelDir, { backend: gpuName, precision: "fp16" });
    const c = gpu.config, G = c.numHeads / c.numKvHeads, D = c.headDim, kvw = c.numKvHeads * D, n = prompt.length + 1;
    const K = new Float32Array(kvw).map((_, i) => Math.sin(i));
    const a = (j: number) => 0.75 * (j - 4);
    const keyAt = (j: number) => setAt("blocks.3.attn.k", K.map((x) => a(j) * x), { positions: [j] });
    const s = gpu.session();
    const p = await s.prefill(prompt, { edits: prompt.map((_, j) => keyAt(j)), capture: ["blocks.3.attn.v"] });
    const d = await s.decode(prompt[0], {
      edits: [keyAt(n - 1)],
      capture: ["blocks.3.attn.q", "blocks.3.attn.v", "blocks.3.attn.gate", "blocks.3.attn.head_out"],
    });
    const v = new Float32Array(n * kvw);
    v.set(p.cache.get("blocks.3.attn.v").data);
    v.set(d.cache.get("blocks.3.attn.v").data, (n - 1) * kvw);
    const [q, gate, out] = ["q", "gate", "head_out"].map((x) => d.cache.get(`blocks.3.attn.${x}`).data);
    const want = new Float32Array(out.length);
    for (let h = 0; h < c.numHeads; h++) {
      const kvh = Math.floor(h / G);
      let qk = 0;
      for (let i = 0; i < D; i++) qk += q[h * D + i] * K[kvh * D + i];
      const scores = Array.from({ length: n }, (_, j) => (a(j) * qk) / Math.sqrt(D));
      const m = Math.max(...scores), e = scores.map((x) => Math.exp(x - m)), total = e.reduce((x, y) => x + y);
      for (let i = 0; i < D; i++) {
        let sum = 0;
        for (let j = 0; j < n; j++) sum += (e[j] / total) * v[j * kvw + kvh * D + i];
        want[h * D + i] = sum / (1 + Math.exp(-gate[h * D + i]));
      }
    }
    expect(maxAbsDiff(out, want)).toBeLessThan(1e-2 * maxAbs(want));
    gpu.dispose();
  });

  test("the values fit together: residual adds, splits of q|k|v, expert outputs, the legacy fields", async () => {
    const c = model.config;
    const all = model.hookPoints().filter((p) => !p.optIn).map((p) => p.name);
    const r = await model.session().prefill(prompt, { capture: [...all, "router", "residual", "deltanet", "attention-gate"], logits: "all" });
    const get = (n: string) => r.cache.get(n).data as Float32Array;
    expect(maxAbsDiff(get("embed"), get("blocks.0.resid_pre"))).toBe(0);
    for (let l = 0; l < c.numLayers; l++) {
      const mixer = c.layerTypes[l] === "linear_attention" ? "deltanet" : "attn";
      const pre = get(`blocks.${l}.resid_pre`), mid = get(`blocks.${l}.resid_mid`), post = get(`blocks.${l}.resid_post`);
      const out = get(`blocks.${l}.${mixer}.out`), moe = get(`blocks.${l}.moe.out`);
      expect(maxAbsDiff(mid, pre.map((v, i) => v + out[i]))).toBeLessThan(1e-5 * maxAbs(mid));
      expect(maxAbsDiff(post, mid.map((v, i) => v + moe[i]))).toBeLessThan(1e-5 * maxAbs(post));
      const split = get(`blocks.${l}.moe.expert_out`).map((v, i) => v + get(`blocks.${l}.moe.shared_out`)[i]);
      expect(maxAbsDiff(moe, split)).toBeLessThan(1e-5 * maxAbs(moe));
      if (l + 1 < c.numLayers) expect(maxAbsDiff(post, get(`blocks.${l + 1}.resid_pre`))).toBe(0);
    }
    // q | k | v are the conv output's thirds
    const conv = r.cache.get("blocks.0.deltanet.conv_out");
    const kd = c.linearKeyHeads * c.linearKeyDim;
    const t = 2;
    const row = conv.index(t).data;
    expect(Array.from(r.cache.get("blocks.0.deltanet.q").index(t).data)).toEqual(Array.from(row.subarray(0, kd)));
    expect(Array.from(r.cache.get("blocks.0.deltanet.k").index(t).data)).toEqual(Array.from(row.subarray(kd, 2 * kd)));
    expect(Array.from(r.cache.get("blocks.0.deltanet.v").index(t).data)).toEqual(Array.from(row.subarray(2 * kd)));
    // the legacy fields are the same values
    expect(Array.from(r.residual!.index(2).data)).toEqual(Array.from(get("blocks.2.resid_post")));
    expect(Array.from(r.router!.ids.index(1).data)).toEqual(Array.from(r.cache.get("blocks.1.moe.topk_ids").data));
    const gate = get("blocks.0.moe.shared_gate");
    expect(r.router!.sharedGate.index(0).data[4]).toBeCloseTo(1 / (1 + Math.exp(-gate[4])), 6);
    expect(Array.from(r.deltanet!.stateNorm.index(1).data)).toEqual(Array.from(get("blocks.1.deltanet.state_norm")));
    // the final norm is the RMSNorm of the last residual (times the norm weights): same direction
    const last = r.cache.get(`blocks.${c.numLayers - 1}.resid_post`).index(0).data;
    expect(r.cache.get("final_norm").index(0).data.length).toBe(last.length);
  });

  test("patterns, positions filter and errors", async () => {
    const r = await model.session().prefill(prompt, { capture: ["blocks.*.moe.router_probs", "blocks.2.resid_post"], capturePositions: [1, 4, 99] });
    expect(r.cache.names()).toEqual([...Array(model.config.numLayers).keys()].map((l) => `blocks.${l}.moe.router_probs`).concat("blocks.2.resid_post"));
    expect(r.cache.get("blocks.2.resid_post").shape).toEqual([2, model.config.hiddenSize]);
    const full = await model.session().prefill(prompt, { capture: ["blocks.2.resid_post"] });
    const h = full.cache.get("blocks.2.resid_post");
    expect(Array.from(r.cache.get("blocks.2.resid_post").index(1).data)).toEqual(Array.from(h.index(4).data));
    // attn.probs only by its own name
    const wild = await model.session().prefill(prompt, { capture: ["blocks.3.attn.*"] });
    expect(wild.cache.has("blocks.3.attn.probs")).toBe(false);
    expect(wild.cache.has("blocks.3.attn.gate")).toBe(true);
    const s = model.session();
    await expect(s.prefill(prompt, { capture: ["blocks.9.resid_post"] })).rejects.toThrow(/unknown capture 'blocks.9.resid_post'/);
    await expect(s.prefill(prompt, { capture: ["blocks.0.attn.q"] })).rejects.toThrow(/unknown capture/);
    expect(() => full.cache.get("embed")).toThrow(/'embed' was not captured/);
    await expect(s.prefill(prompt, { capture: ["router"], capturePositions: [1] })).rejects.toThrow(/capture kinds \(router\) record every position/);
    expect(s.position).toBe(0);
  });

  test("decode captures one row; a long prefill in chunks captures every row", async () => {
    const s = model.session();
    await s.prefill(prompt);
    const d = await s.decode(prompt[0], { capture: ["blocks.3.attn.probs", "blocks.0.resid_post"] });
    expect(d.cache.get("blocks.3.attn.probs").shape).toEqual([model.config.numHeads, 1, prompt.length + 1]);
    const long = Array.from({ length: 600 }, (_, i) => (i * 7) % model.config.vocabSize);
    const one = await model.session().prefill(long, { capture: ["blocks.1.resid_mid"] });
    const two = model.session();
    await two.prefill(long.slice(0, 520));
    const rest = await two.prefill(long.slice(520), { capture: ["blocks.1.resid_mid"] });
    const a = one.cache.get("blocks.1.resid_mid");
    expect(a.shape).toEqual([600, model.config.hiddenSize]);
    expect(maxAbsDiff(a.slice(0, 520).data, rest.cache.get("blocks.1.resid_mid").data)).toBeLessThan(1e-4 * maxAbs(a.data));
  });
});

describe("edits at hook points", () => {
  const capture = ["blocks.1.resid_mid", "blocks.1.resid_post", "blocks.1.moe.out", "blocks.3.attn.out", "blocks.3.resid_pre",
    "blocks.3.resid_mid", "blocks.0.resid_pre", "blocks.0.deltanet.head_out", "blocks.2.moe.router_logits", "blocks.2.moe.topk_ids"];
  let base: ForwardResult;
  beforeAll(async () => {
    base = await model.session().prefill(prompt, { capture, logits: "all" });
  });
  const at = (r: typeof base, n: string) => r.cache.get(n).data as Float32Array;

  test("zero: the MoE output of layer 1 is removed from the residual", async () => {
    const r = await model.session().prefill(prompt, { capture, edits: [zeroAt("blocks.1.moe.out")] });
    expect(maxAbs(at(r, "blocks.1.moe.out"))).toBe(0);
    expect(maxAbsDiff(at(r, "blocks.1.resid_post"), at(r, "blocks.1.resid_mid"))).toBe(0);
    expect(maxAbsDiff(at(r, "blocks.1.resid_mid"), at(base, "blocks.1.resid_mid"))).toBe(0);
  });

  test("scale: doubling the attention output doubles what it adds", async () => {
    const r = await model.session().prefill(prompt, { capture, edits: [scaleAt("blocks.3.attn.out", 2)] });
    const out = at(base, "blocks.3.attn.out");
    expect(maxAbsDiff(at(r, "blocks.3.attn.out"), out.map((v) => 2 * v))).toBe(0);
    const want = at(base, "blocks.3.resid_pre").map((v, i) => v + 2 * out[i]);
    expect(maxAbsDiff(at(r, "blocks.3.resid_mid"), want)).toBeLessThan(1e-6 * maxAbs(want));
  });

  test("set and add with positions and channels touch only what they select", async () => {
    const H = model.config.hiddenSize;
    const row = new Float32Array(H).map((_, i) => i / H);
    const r = await model.session().prefill(prompt, {
      capture,
      edits: [
        setAt("blocks.0.resid_pre", row, { positions: [2] }),
        addAt("blocks.0.resid_pre", new Float32Array([5, -5]), { positions: [4, 5], channels: [3, 7] }),
      ],
    });
    const before = base.cache.get("blocks.0.resid_pre"), after = r.cache.get("blocks.0.resid_pre");
    for (let t = 0; t < prompt.length; t++) {
      const want = Float32Array.from(before.index(t).data);
      if (t === 2) want.set(row);
      if (t === 4 || t === 5) (want[3] += 5), (want[7] -= 5);
      expect(maxAbsDiff(after.index(t).data, want), `position ${t}`).toBeLessThan(1e-6);
    }
  });

  test("mean ablation of one DeltaNet head: its output is its mean over the call's positions", async () => {
    const c = model.config;
    const r = await model.session().prefill(prompt, { capture, edits: [meanAblate("blocks.0.deltanet.head_out", { heads: [1] })] });
    const before = base.cache.get("blocks.0.deltanet.head_out"), after = r.cache.get("blocks.0.deltanet.head_out");
    expect(after.shape).toEqual([prompt.length, c.linearValueHeads, c.linearValueDim]);
    const T = prompt.length;
    for (let t = 0; t < T; t++) {
      expect(Array.from(after.index(t).index(0).data)).toEqual(Array.from(before.index(t).index(0).data));
      for (let k = 0; k < c.linearValueDim; k++) {
        let mean = 0;
        for (let u = 0; u < T; u++) mean += before.get(u, 1, k) / T;
        expect(after.get(t, 1, k)).toBeCloseTo(mean, 5);
      }
    }
  });

  test("router edits: a bias forces an expert, set router logits choose it too", async () => {
    const E = model.config.numExperts;
    const ids = (r: typeof base) => Array.from(r.cache.get("blocks.2.moe.topk_ids").data as Int32Array);
    const K = model.config.expertsPerToken;
    const count = (e: number) => ids(base).filter((x) => x === e).length;
    const rare = [...Array(E).keys()].reduce((a, e) => (count(e) < count(a) ? e : a), 0);
    expect(count(rare)).toBeLessThan(prompt.length);
    const biased = await model.session().prefill(prompt, { capture, interventions: [biasExperts(2, [rare], [100])] });
    for (let t = 0; t < prompt.length; t++) expect(ids(biased).slice(t * K, (t + 1) * K)).toContain(rare);
    const logits = new Float32Array([50]);
    const set = await model.session().prefill(prompt, { capture, edits: [setAt("blocks.2.moe.router_logits", logits, { channels: [rare] })] });
    for (let t = 0; t < prompt.length; t++) expect(ids(set).slice(t * K, (t + 1) * K)[0]).toBe(rare);
  });

  test("decodeGreedy applies edits as decode does", async () => {
    const edits = [scaleAt("blocks.1.deltanet.out", 0.5)];
    const argmax = (a: Float32Array) => a.reduce((b, v, i) => (v > a[b] ? i : b), 0);
    const loop = model.session();
    let next = argmax((await loop.prefill(prompt, { edits })).logits.data);
    const first = next, want: number[] = [];
    for (let i = 0; i < 4; i++) want.push((next = argmax((await loop.decode(next, { edits })).logits.data)));
    const s = model.session();
    await s.prefill(prompt, { edits });
    expect(await s.decodeGreedy(first, 4, { edits })).toEqual(want);
  });

  test("bad edits are refused with a clear error and leave the session alone", async () => {
    const s = model.session();
    await expect(s.prefill(prompt, { edits: [zeroAt("blocks.0.moe.router_probs")] })).rejects.toThrow(/router_probs is read-only/);
    await expect(s.prefill(prompt, { edits: [zeroAt("blocks.0.resid_post", { heads: [0] })] })).rejects.toThrow(/has no heads/);
    await expect(s.prefill(prompt, { edits: [zeroAt("blocks.0.deltanet.head_out", { heads: [9] })] })).rejects.toThrow(/head 9 is outside/);
    await expect(s.prefill(prompt, { edits: [setAt("embed", new Float32Array(3))] })).rejects.toThrow(/3 values for embed/);
    await expect(s.prefill(prompt, { edits: [zeroAt("blocks.7.resid_post")] })).rejects.toThrow(/names no hook point/);
    await expect(s.prefill(prompt, { edits: [{ hook: "embed", op: "nope" } as never] })).rejects.toThrow(/op 'nope' is unknown/);
    expect(s.position).toBe(0);
  });
});

describe("hook functions", () => {
  test("see the value the capture sees, with shape and positions; undefined leaves it", async () => {
    const seen: { shape: number[]; positions: number[]; data: Float32Array }[] = [];
    const s = model.session();
    await s.prefill(prompt.slice(0, 2));
    const r = await s.prefill(prompt.slice(2), {
      capture: ["blocks.2.deltanet.out"],
      logits: "all",
      hooks: [["blocks.2.deltanet.out", (v, ctx) => void seen.push({ shape: v.shape, positions: ctx.positions, data: v.data.slice() })]],
    });
    expect(seen).toHaveLength(1);
    expect(seen[0].shape).toEqual([prompt.length - 2, model.config.hiddenSize]);
    expect(seen[0].positions).toEqual([...Array(prompt.length - 2).keys()].map((i) => i + 2));
    expect(Array.from(seen[0].data)).toEqual(Array.from(r.cache.get("blocks.2.deltanet.out").data));
    const plain = model.session();
    await plain.prefill(prompt.slice(0, 2));
    expect(Array.from((await plain.prefill(prompt.slice(2), { logits: "all" })).logits.data)).toEqual(Array.from(r.logits.data));
  });

  test("a replacement changes the forward pass as the same edit does", async () => {
    const zeroed = await model.session().prefill(prompt, { logits: "all", edits: [zeroAt("blocks.2.deltanet.out")] });
    const calls: string[] = [];
    const hooked = await model.session().prefill(prompt, {
      logits: "all",
      hooks: [["blocks.*.deltanet.out", (v, ctx) => (calls.push(ctx.name), ctx.layer === 2 ? new Tensor(v.shape, new Float32Array(v.size)) : undefined)]],
    });
    expect(calls).toEqual(["blocks.0.deltanet.out", "blocks.1.deltanet.out", "blocks.2.deltanet.out"]);
    expect(Array.from(hooked.logits.data)).toEqual(Array.from(zeroed.logits.data));
  });

  test("an exception rejects the call and leaves the session as it was", async () => {
    const s = model.session();
    await s.prefill(prompt.slice(0, 4));
    const boom = new Error("hook failed on purpose");
    await expect(
      s.prefill(prompt.slice(4), { hooks: [["blocks.3.attn.out", () => { throw boom; }]] }),
    ).rejects.toBe(boom);
    expect(s.position).toBe(4);
    await expect(s.prefill(prompt.slice(4), { hooks: [["embed", () => new Float32Array(2)]] })).rejects.toThrow(/returned 2 values/);
    const after = await s.prefill(prompt.slice(4), { logits: "all" });
    const fresh = model.session();
    await fresh.prefill(prompt.slice(0, 4));
    expect(Array.from(after.logits.data)).toEqual(Array.from((await fresh.prefill(prompt.slice(4), { logits: "all" })).logits.data));
  });
});
