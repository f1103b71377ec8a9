// Looking inside: router traces, expert load, DeltaNet gates and state, attention weights, the logit
// lens, Arrow export, and interventions that change the computation (checked against transformers).
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { tableFromIPC } from "apache-arrow";
import { beforeAll, describe, expect, test } from "vitest";
import {
  ExpertLoad,
  disableExperts,
  forceExperts,
  load,
  patchResidual,
  resetDeltaNetState,
  scaleSharedExpert,
  steer,
  writeArrowFile,
  writeArrowStream,
  type Model,
} from "moelens";
import { fixtureCases, fixturesDir, get } from "./helpers/fixtures";
import { readSafetensors, std } from "./helpers/safetensors";

const t1 = fixtureCases().find((c) => c.name === "t1/mlx")!;
const prompt = Array.from(get(t1.ref, "p0.input_ids").data);

let model: Model;
beforeAll(async () => {
  model = await load(t1.modelDir);
});

function maxRelDiff(a: Float32Array, b: Float32Array): number {
  let worst = 0;
  const scale = std(b);
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]) / scale);
  return worst;
}

describe("router trace and expert load", () => {
  test("the trace equals the fixture's router ids and weights", async () => {
    const r = await model.session().prefill(prompt, { capture: ["router"] });
    const ids = get(t1.ref, "p0.router_ids").data;
    const weights = get(t1.ref, "p0.router_weights").data;
    expect(r.router!.ids.shape).toEqual(get(t1.ref, "p0.router_ids").shape);
    let same = 0;
    for (let i = 0; i < ids.length; i++) {
      if (r.router!.ids.data[i] === ids[i]) {
        same++;
        expect(Math.abs(r.router!.weights.data[i] - weights[i])).toBeLessThan(1e-4);
      }
    }
    expect(same / ids.length).toBeGreaterThan(0.99);
    // probabilities: a distribution per row, and the chosen weights are their renormalised top-k
    const probs = r.router!.probs;
    const [L, T, E] = probs.shape;
    for (const [l, t] of [[0, 0], [L - 1, T - 1]]) {
      const p = probs.index(l).index(t).data;
      expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5);
      const chosen = r.router!.chosen(l, t);
      const total = chosen.reduce((a, c) => a + p[c.expert], 0);
      for (const c of chosen) expect(c.weight).toBeCloseTo(p[c.expert] / total, 5);
    }
    expect(E).toBe(model.config.numExperts);
    for (const g of r.router!.sharedGate.data) expect(g > 0 && g < 1).toBe(true);
  });

  test("expert load equals counts recomputed from the trace, and accumulates over a session", async () => {
    const s = model.session();
    const a = await s.prefill(prompt.slice(0, 40), { capture: ["router"] });
    const b = await s.decode(prompt[40], { capture: ["router"] });
    const load = ExpertLoad.from([a.router!, b.router!]);
    const { numLayers: L, numExperts: E, expertsPerToken: K } = model.config;
    for (let l = 0; l < L; l++) {
      const counts = new Array(E).fill(0);
      for (const tr of [a.router!, b.router!]) for (const id of tr.ids.index(l).data) counts[id]++;
      expect(Array.from(load.counts.index(l).data)).toEqual(counts);
      expect(load.fraction(l).reduce((x, y) => x + y, 0)).toBeCloseTo(K, 5);
      expect(load.entropy(l)).toBeGreaterThan(0);
      expect(load.entropy(l)).toBeLessThanOrEqual(Math.log(E) + 1e-9);
    }
    expect(load.tokens).toBe(41);
    expect(Array.from(s.expertLoad!.counts.data)).toEqual(Array.from(load.counts.data));
    // auxiliary loss: E * sum_e f_e P_e over all layers' rows; 1.0 would be perfect balance with uniform probabilities
    let manual = 0;
    for (let e = 0; e < E; e++) {
      let c = 0;
      let m = 0;
      for (let l = 0; l < L; l++) {
        c += load.counts.get(l, e);
        m += load.mass.get(l, e);
      }
      manual += (c / (41 * L)) * (m / (41 * L));
    }
    expect(load.auxLoss()).toBeCloseTo(manual * E, 6);
    expect(load.coefficientOfVariation(0)).toBeGreaterThanOrEqual(0);
  });

  test("toArrow: one row per (layer, position, slot), written and read back as Arrow IPC file and stream", async () => {
    const s = model.session();
    await s.prefill(prompt.slice(0, 5));
    const r = await s.prefill(prompt.slice(5, 12), { capture: ["router"] });
    const table = r.router!.toArrow();
    const { numLayers: L, expertsPerToken: K } = model.config;
    expect(table.numRows).toBe(L * 7 * K);
    for (const col of ["token", "position", "layer", "slot", "expert", "weight"]) expect(table.getChild(col)).toBeTruthy();
    expect(table.get(0)!.position).toBe(5);
    expect(table.get(0)!.token).toBe(prompt[5]);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-arrow-"));
    const file = path.join(dir, "router.arrow");
    const stream = path.join(dir, "router.arrows");
    writeArrowFile(table, file);
    writeArrowStream(table, stream);
    for (const f of [file, stream]) {
      const back = tableFromIPC(fs.readFileSync(f));
      expect(back.numRows).toBe(table.numRows);
      expect(Array.from(back.getChild("expert")!.toArray())).toEqual(Array.from(r.router!.ids.data));
      expect(Array.from(back.getChild("weight")!.toArray())).toEqual(Array.from(r.router!.weights.data));
    }
    fs.rmSync(dir, { recursive: true });
  });
});

describe("residual stream and logit lens", () => {
  test("the logit lens at the last layer equals the model's logits", async () => {
    const s = model.session();
    const r = await s.prefill(prompt.slice(0, 10), { logits: "all", capture: ["residual", "residual-mid"] });
    const L = model.config.numLayers;
    const lens = await s.logitLens(r, { top: 3, layers: [L - 1] });
    expect(lens).toHaveLength(10);
    for (const row of lens) {
      const t = row.position;
      const logits = r.logits.index(t).data;
      const best = Array.from(logits.keys()).sort((a, b) => logits[b] - logits[a]).slice(0, 3);
      expect(row.ids).toEqual(best);
      for (let i = 0; i < 3; i++) expect(row.logits[i]).toBeCloseTo(logits[best[i]], 3);
    }
    const all = await s.logitLens(r, { top: 1 });
    expect(all).toHaveLength(L * 10);
    // After the mixing sublayer and after the whole layer differ by the MoE output.
    expect(r.residualMid!.shape).toEqual(r.residual!.shape);
    expect(r.residualMid!.index(0).data).not.toEqual(r.residual!.index(0).data);
  });
});

describe("DeltaNet and attention traces", () => {
  test("gates are in range and the state norm matches the state snapshot", async () => {
    const s = model.session();
    const r = await s.prefill(prompt.slice(0, 20), { capture: ["deltanet"] });
    const dn = r.deltanet!;
    expect(dn.layers).toEqual(model.config.layerTypes.flatMap((t, i) => (t === "linear_attention" ? [i] : [])));
    for (const b of dn.beta.data) expect(b > 0 && b < 1).toBe(true);
    for (const d of dn.decay.data) expect(d > 0 && d <= 1).toBe(true);
    const layer = dn.layers[1];
    const state = s.deltanetState(layer);
    const Hv = model.config.linearValueHeads;
    for (let h = 0; h < Hv; h++) {
      const head = state.recurrent.index(h).data;
      const norm = Math.sqrt(head.reduce((a, x) => a + x * x, 0));
      expect(norm).toBeCloseTo(dn.stateNorm.get(dn.indexOf(layer), 19, h), 3);
    }
    expect(state.conv.shape).toEqual([model.config.convKernel - 1, state.conv.shape[1]]);
    expect(dn.toArrow().numRows).toBe(dn.layers.length * 20 * Hv);
  });

  test("resetting the DeltaNet state makes the first layer forget the prefix", async () => {
    const s = model.session();
    await s.prefill(prompt.slice(0, 30));
    await s.decode(prompt[30], { interventions: [resetDeltaNetState()] });
    const fresh = model.session();
    await fresh.decode(prompt[30]);
    // Layer 0 sees only token embeddings, so after a reset its state is that of a fresh session.
    const a = s.deltanetState(0).recurrent.data;
    const b = fresh.deltanetState(0).recurrent.data;
    for (let i = 0; i < a.length; i++) expect(a[i]).toBeCloseTo(b[i], 5);
  });

  test("attention weights are causal distributions; the capture is bounded", async () => {
    const attnLayer = model.config.layerTypes.indexOf("full_attention");
    const s = model.session();
    await s.prefill(prompt.slice(0, 4));
    const r = await s.prefill(prompt.slice(4, 9), { attention: { layers: [attnLayer], heads: [1, 0] }, capture: ["attention-gate"] });
    const w = r.attention!.weights;
    expect(w.shape).toEqual([1, 2, 5, 9]);
    for (let h = 0; h < 2; h++)
      for (let t = 0; t < 5; t++) {
        const row = w.index(0).index(h).index(t).data;
        expect(row.slice(0, 4 + t + 1).reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5);
        for (let k = 4 + t + 1; k < 9; k++) expect(row[k]).toBe(0);
      }
    expect(r.attention!.heads).toEqual([1, 0]);
    expect(r.attentionGate!.values.shape).toEqual([1, 5, model.config.numHeads * model.config.headDim]);
    await expect(s.prefill([1], { attention: { layers: [0] } })).rejects.toThrow(/not an attention layer/);
  });
});

describe("interventions", () => {
  test("a disabled expert never appears in its layer, on prefill and decode", async () => {
    const s = model.session();
    const base = await s.prefill(prompt.slice(0, 20), { capture: ["router"] });
    const layer = 1;
    const popular = new Map<number, number>();
    for (const e of base.router!.ids.index(layer).data) popular.set(e, (popular.get(e) ?? 0) + 1);
    const e = [...popular.entries()].sort((a, b) => b[1] - a[1])[0][0];
    const s2 = model.session();
    const r = await s2.prefill(prompt.slice(0, 20), { capture: ["router"], logits: "all", interventions: [disableExperts(layer, [e])] });
    expect(Array.from(r.router!.ids.index(layer).data)).not.toContain(e);
    for (let l = 0; l < layer; l++) expect(r.router!.ids.index(l).data).toEqual(base.router!.ids.index(l).data);
    const d = await s2.decode(prompt[20], { capture: ["router"], interventions: [disableExperts(layer, [e])] });
    expect(Array.from(d.router!.ids.index(layer).data)).not.toContain(e);
    // Weights renormalise over the remaining experts.
    expect(d.router!.weights.index(layer).data.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5);
  });

  test("forced experts are always chosen; per-position edits touch only those positions", async () => {
    const layer = 2;
    const r = await model.session().prefill(prompt.slice(0, 8), {
      capture: ["router"],
      interventions: [forceExperts(layer, [3, 11], [2, 5])],
    });
    for (let t = 0; t < 8; t++) {
      const ids = Array.from(r.router!.ids.index(layer).index(t).data);
      if (t === 2 || t === 5) expect(ids).toEqual(expect.arrayContaining([3, 11]));
    }
    const plain = await model.session().prefill(prompt.slice(0, 8), { capture: ["router"] });
    expect(r.router!.ids.index(layer).index(0).data).toEqual(plain.router!.ids.index(layer).index(0).data);
  });

  test("interventions are scoped: per call, persistent until removed, never inherited by forks", async () => {
    const s = model.session();
    const base = (await model.session().prefill(prompt.slice(0, 6))).logits.data;
    const off = scaleSharedExpert(0);
    const handle = s.addIntervention(off);
    const edited = (await s.prefill(prompt.slice(0, 6))).logits.data;
    expect(maxRelDiff(edited, base)).toBeGreaterThan(1e-3);
    const child = s.fork();
    expect(child.interventions).toHaveLength(0);
    handle.remove();
    expect(s.interventions).toHaveLength(0);
    s.reset();
    expect(Array.from((await s.prefill(prompt.slice(0, 6))).logits.data)).toEqual(Array.from(base));
  });

  test("decodeGreedy applies interventions as the decode loop does, and refuses bad input", async () => {
    const argmax = (a: Float32Array) => a.reduce((b, v, i) => (v > a[b] ? i : b), 0);
    const edits = [scaleSharedExpert(0), disableExperts(1, [0, 1, 2])];
    const loop = model.session();
    let next = argmax((await loop.prefill(prompt.slice(0, 6), { interventions: edits })).logits.data);
    const first = next;
    const want: number[] = [];
    for (let i = 0; i < 5; i++) want.push((next = argmax((await loop.decode(next, { interventions: edits })).logits.data)));
    const s = model.session();
    await s.prefill(prompt.slice(0, 6), { interventions: edits });
    expect(await s.decodeGreedy(first, 5, { interventions: edits })).toEqual(want);
    await expect(s.decodeGreedy(-1, 2)).rejects.toThrow(/token id -1/);
    await expect(s.decodeGreedy(first, 0)).rejects.toThrow(/positive integer/);
    await expect(s.decodeGreedy(first, 2, { interventions: [disableExperts(99, [0])] })).rejects.toThrow(/layer 99/);
    expect(s.position).toBe(11);
  });

  test("bad interventions are refused with a clear error", async () => {
    const s = model.session();
    const E = model.config.numExperts;
    await expect(s.prefill([1], { interventions: [disableExperts(99, [0])] })).rejects.toThrow(/layer 99/);
    await expect(s.prefill([1], { interventions: [disableExperts(0, [E])] })).rejects.toThrow(/expert 16 is outside/);
    await expect(s.prefill([1], { interventions: [disableExperts(0, [...Array(E - 1).keys()])] })).rejects.toThrow(/fewer than top-k/);
    await expect(s.prefill([1], { interventions: [steer(0, new Float32Array(3))] })).rejects.toThrow(/hidden size/);
    await expect(s.prefill([1], { interventions: [{ type: "nope" } as never] })).rejects.toThrow(/unknown/);
    expect(s.position).toBe(0);
  });
});

// Interventions checked against the same edit made in transformers (scripts/reference).
const interventionRefs = fs
  .readdirSync(fixturesDir)
  .flatMap((f) => ["hf", "mlx"].map((layout) => ({ f, layout, file: path.join(fixturesDir, f, `interventions_${layout}.safetensors`) })))
  .filter((x) => fs.existsSync(x.file));

test("intervention references exist", () => {
  expect(interventionRefs.length).toBeGreaterThanOrEqual(1);
});

describe.each(interventionRefs)("transformers parity of interventions: $f/$layout", ({ f, layout, file }) => {
  const ref = readSafetensors(file);
  let m: Model;
  beforeAll(async () => {
    m = await load(path.join(fixturesDir, f, layout));
  });
  const close = (ours: Float32Array, theirs: Float32Array) => {
    const V = m.config.vocabSize;
    for (let t = 0; t < theirs.length / V; t++) {
      const r = theirs.subarray(t * V, (t + 1) * V);
      const o = ours.subarray(t * V, (t + 1) * V);
      const tol = 1e-3 * std(r);
      let worst = 0;
      for (let i = 0; i < V; i++) worst = Math.max(worst, Math.abs(o[i] - r[i]));
      expect(worst, `position ${t}`).toBeLessThanOrEqual(tol);
    }
  };
  const int = (k: string) => Array.from(get(ref, k).data);

  test("expert ablation", async () => {
    const layer = int("ablate.layer")[0];
    const experts = int("ablate.experts");
    const r = await m.session().prefill(int("ablate.input_ids"), {
      logits: "all",
      capture: ["router"],
      interventions: [disableExperts(layer, experts)],
    });
    for (const e of experts) expect(Array.from(r.router!.ids.index(layer).data)).not.toContain(e);
    close(r.logits.data, get(ref, "ablate.logits").data as Float32Array);
  });

  test("steering", async () => {
    const r = await m.session().prefill(int("steer.input_ids"), {
      logits: "all",
      interventions: [steer(int("steer.layer")[0], get(ref, "steer.vector").data as Float32Array)],
    });
    close(r.logits.data, get(ref, "steer.logits").data as Float32Array);
  });

  test("residual patching from another run", async () => {
    const layer = int("patch.layer")[0];
    const position = int("patch.position")[0];
    const source = await m.session().prefill(int("patch.source_ids"), { capture: ["residual"] });
    const r = await m.session().prefill(int("patch.target_ids"), {
      logits: "all",
      interventions: [patchResidual(layer, position, source.residual!)],
    });
    close(r.logits.data, get(ref, "patch.logits").data as Float32Array);
  });

  test("shared expert off", async () => {
    const r = await m.session().prefill(int("shared_off.input_ids"), { logits: "all", interventions: [scaleSharedExpert(0)] });
    close(r.logits.data, get(ref, "shared_off.logits").data as Float32Array);
  });
});
