// Parity of the CPU backend with the transformers reference on every fixture and layout:
// logits at every position, greedy decode through the caches, router top-k sets, residual stream,
// split prefills and forks. Both exact-class precisions run every check with the same tolerances:
// "fp32" (the default) and "int24" (integer activations whose rounding is of the order of fp32's).
// With MOELENS_TEST_GPU_BACKEND (e.g. "cuda") the same checks run on that GPU backend at its exact
// precision, "fp32", with the same tolerances.
import { describe, expect, test } from "vitest";
import { load, type Model, type Precision } from "moelens";
import { fixtureCases, get } from "./helpers/fixtures";
import { chosenGpuBackend } from "./helpers/gpu-backend";
import { std } from "./helpers/safetensors";

const backend = chosenGpuBackend ?? "cpu";
const parityPrecisions: Precision[] = chosenGpuBackend ? ["fp32"] : ["fp32", "int24"];
const cases = fixtureCases().flatMap((c) => parityPrecisions.map((precision) => ({ ...c, precision, backend })));

// Logits within 1e-3 of the reference logits' standard deviation, at each position.
function expectLogitsClose(ours: Float32Array, ref: Float32Array, vocab: number, what: string) {
  expect(ours.length).toBe(ref.length);
  for (let t = 0; t < ref.length / vocab; t++) {
    const r = ref.subarray(t * vocab, (t + 1) * vocab);
    const o = ours.subarray(t * vocab, (t + 1) * vocab);
    const tol = 1e-3 * std(r);
    let worst = 0;
    for (let i = 0; i < vocab; i++) worst = Math.max(worst, Math.abs(o[i] - r[i]));
    if (worst > tol) throw new Error(`${what}: position ${t}: max |diff| ${worst} > ${tol}`);
  }
}

function argmax(a: Float32Array): number {
  let b = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[b]) b = i;
  return b;
}

test("fixtures are present", () => {
  expect(cases.length).toBeGreaterThanOrEqual(2);
});

describe.each(cases)("$name, $backend, $precision", ({ modelDir, ref, prompts, precision, backend }) => {
  let model: Model;
  const vocab = () => model.config.vocabSize;

  test("loads", async () => {
    model = await load(modelDir, { backend, precision });
    expect(model.info.backend).toBe(backend);
    expect(model.info.precision).toBe(precision);
    expect(model.config.numLayers).toBe(get(ref, `${prompts[0]}.hidden`).shape[0]);
  });

  test.each(prompts)("%s: logits, residual and router match transformers", async (p) => {
    const ids = Array.from(get(ref, `${p}.input_ids`).data);
    // Dense models (qwen3_5) have no router: their references record none.
    const routed = ref.has(`${p}.router_ids`);
    const r = await model.session().prefill(ids, { logits: "all", capture: routed ? ["router", "residual"] : ["residual"] });
    expectLogitsClose(r.logits.data, get(ref, `${p}.logits`).data as Float32Array, vocab(), p);

    // Residual stream after each layer: 1e-3 relative per (layer, token) row.
    const hidden = get(ref, `${p}.hidden`);
    const H = hidden.shape[2];
    const res = r.residual!;
    expect(res.shape).toEqual(hidden.shape);
    for (let row = 0; row < hidden.data.length / H; row++) {
      let num = 0;
      let den = 0;
      for (let i = row * H; i < (row + 1) * H; i++) {
        num += (res.data[i] - hidden.data[i]) ** 2;
        den += hidden.data[i] ** 2;
      }
      expect(Math.sqrt(num / den), `residual row ${row}`).toBeLessThan(1e-3);
    }

    // Router: identical top-k sets except where the reference itself has a near-tie at the k-th place.
    if (!routed) {
      expect(model.config.numExperts, "a mixture of experts without router references").toBe(0);
      return;
    }
    const refIds = get(ref, `${p}.router_ids`);
    const refLogits = get(ref, `${p}.router_logits`).data;
    const [L, T, K] = refIds.shape;
    const E = refLogits.length / (L * T);
    for (let l = 0; l < L; l++) {
      for (let t = 0; t < T; t++) {
        const row = (l * T + t) * K;
        const ours = new Set(r.router!.ids.data.subarray(row, row + K));
        const theirs = new Set(refIds.data.subarray(row, row + K));
        const sorted = Array.from(refLogits.subarray((l * T + t) * E, (l * T + t + 1) * E)).sort((a, b) => b - a);
        const nearTie = sorted[K - 1] - sorted[K] < 1e-4;
        if (!nearTie) expect(ours, `layer ${l} token ${t}`).toEqual(theirs);
        // Weights are renormalised and descending.
        const w = r.router!.weights.data.subarray(row, row + K);
        expect(w.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 5);
        for (let s = 1; s < K; s++) expect(w[s]).toBeLessThanOrEqual(w[s - 1]);
      }
    }
    expect(r.router!.logits.data.length).toBe(refLogits.length);
  });

  test("greedy decode through the caches follows the reference", async () => {
    expect(ref.has("p0.greedy_ids"), "fixtures must record a greedy decode").toBe(true);
    const ids = Array.from(get(ref, "p0.input_ids").data);
    const greedy = get(ref, "p0.greedy_ids").data;
    const greedyLogits = get(ref, "p0.greedy_logits").data as Float32Array;
    const s = model.session();
    let next = argmax((await s.prefill(ids)).logits.data);
    for (let i = 0; i < greedy.length; i++) {
      expect(next, `greedy token ${i}`).toBe(greedy[i]);
      const d = await s.decode(next);
      expectLogitsClose(d.logits.data, greedyLogits.subarray(i * vocab(), (i + 1) * vocab()), vocab(), `decode ${i}`);
      next = argmax(d.logits.data);
    }
    expect(s.position).toBe(ids.length + greedy.length);
  });

  test("prefill in several calls equals one call", async () => {
    const ids = Array.from(get(ref, `${prompts[0]}.input_ids`).data);
    const whole = await model.session().prefill(ids, { logits: "all" });
    const s = model.session();
    const cuts = [0, Math.floor(ids.length / 3), Math.floor(ids.length / 3) + 1, ids.length];
    const parts: Float32Array[] = [];
    for (let i = 0; i + 1 < cuts.length; i++) {
      if (cuts[i] === cuts[i + 1]) continue;
      parts.push((await s.prefill(ids.slice(cuts[i], cuts[i + 1]), { logits: "all" })).logits.data);
    }
    const joined = new Float32Array(whole.logits.data.length);
    let off = 0;
    for (const part of parts) {
      joined.set(part, off);
      off += part.length;
    }
    expectLogitsClose(joined, whole.logits.data, vocab(), "split prefill");
  });

  test("a fork continues exactly like its parent", async () => {
    const ids = Array.from(get(ref, `${prompts[0]}.input_ids`).data);
    const half = Math.max(1, Math.floor(ids.length / 2));
    const parent = model.session();
    await parent.prefill(ids.slice(0, half));
    const child = parent.fork();
    expect(child.position).toBe(half);
    // The child diverges first; the parent must be unaffected by it.
    await child.decode(0);
    const rest = ids.slice(half).length ? ids.slice(half) : [1];
    const a = await parent.prefill(rest, { logits: "all" });
    child.reset();
    await child.prefill(ids.slice(0, half));
    const b = await child.prefill(rest, { logits: "all" });
    expect(Array.from(a.logits.data)).toEqual(Array.from(b.logits.data));
    const c = parent.fork();
    const d1 = await parent.decode(3);
    const d2 = await c.decode(3);
    expect(Array.from(d2.logits.data)).toEqual(Array.from(d1.logits.data));
  });
});
