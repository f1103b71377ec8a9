// Long prompts run in chunks of `prefillChunk` tokens (the backend's default, or the load option): the
// result must not depend on where the chunks end, on the CPU backend and on the GPU backend's kernels
// (the emulator), including a ragged last chunk and, in fp16, chunks on both sides of the tiled
// kernels' threshold and tiled chunks of a few tokens. With MOELENS_TEST_GPU_BACKEND (e.g. "cuda") the
// GPU side runs on that backend.
import { describe, expect, test } from "vitest";
import { load, type BackendName } from "moelens";
import { native } from "../sdk/native";
import { fixtureCases, get } from "./helpers/fixtures";
import { gpuBackend, TILED_FROM } from "./helpers/gpu-backend";

const t1 = fixtureCases().find((c) => c.name === "t1/mlx")!;
const gpuName = gpuBackend("emulator");

function maxRowDiff(a: Float32Array, b: Float32Array, width: number): number {
  let worst = 0;
  for (let r = 0; r < b.length / width; r++) {
    let diff = 0;
    let scale = 0;
    for (let i = r * width; i < (r + 1) * width; i++) {
      diff = Math.max(diff, Math.abs(a[i] - b[i]));
      scale = Math.max(scale, Math.abs(b[i]));
    }
    worst = Math.max(worst, diff / scale);
  }
  return worst;
}

function argmax(a: Float32Array): number {
  let b = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[b]) b = i;
  return b;
}

async function logits(
  backend: BackendName,
  options: { prefillChunk?: number; precision?: "fp32" | "fp16"; prefillMinTokens?: number },
  ids: number[],
) {
  const model = await load(t1.modelDir, { backend, threads: 1, fresh: true, ...options });
  const s = model.session();
  const r = await s.prefill(ids, { logits: "all" });
  const next = await s.decode(argmax(r.logits.data.subarray((ids.length - 1) * model.config.vocabSize)));
  model.dispose();
  return { all: r.logits.data, next: next.logits.data, vocab: model.config.vocabSize };
}

describe("prefill in chunks", () => {
  const ids = Array.from(get(t1.ref, "p0.input_ids").data).slice(0, 60);

  test("the CPU backend gives the same logits for any chunk size", async () => {
    const whole = await logits("cpu", {}, ids);
    const chunked = await logits("cpu", { prefillChunk: 7 }, ids);
    expect(maxRowDiff(chunked.all, whole.all, whole.vocab)).toBeLessThan(1e-5);
    expect(maxRowDiff(chunked.next, whole.next, whole.vocab)).toBeLessThan(1e-5);
  });

  test(`the GPU kernels (exact precision, ${gpuName}) give the CPU's logits with a ragged last chunk`, async () => {
    const cpu = await logits("cpu", {}, ids);
    const gpu = await logits(gpuName, { precision: "fp32", prefillChunk: 24 }, ids);
    expect(maxRowDiff(gpu.all, cpu.all, cpu.vocab)).toBeLessThan(1e-4);
    expect(maxRowDiff(gpu.next, cpu.next, cpu.vocab)).toBeLessThan(1e-4);
  });

  test(`the GPU kernels in fp16 (${gpuName}) choose the CPU's top-1 with chunks on both sides of the tiled threshold`, async () => {
    const cpu = await logits("cpu", {}, ids);
    const gpu = await logits(gpuName, { precision: "fp16", prefillChunk: 24, prefillMinTokens: TILED_FROM }, ids);  // 24 + 24 + 12 tokens
    let agree = 0;
    for (let t = 0; t < ids.length; t++) {
      const c = cpu.all.subarray(t * cpu.vocab, (t + 1) * cpu.vocab);
      const g = gpu.all.subarray(t * cpu.vocab, (t + 1) * cpu.vocab);
      if (argmax(c) === argmax(g)) agree++;
    }
    expect(agree / ids.length).toBeGreaterThanOrEqual(0.995);
    expect(argmax(gpu.next)).toBe(argmax(cpu.next));
  });

  test(`the GPU kernels in fp16 (${gpuName}) choose the CPU's top-1 on tiled chunks of a few tokens`, async () => {
    const cpu = await logits("cpu", {}, ids);
    const agreement = (gpu: { all: Float32Array }, n: number) => {
      let agree = 0;
      for (let t = 0; t < n; t++)
        if (argmax(cpu.all.subarray(t * cpu.vocab, (t + 1) * cpu.vocab)) === argmax(gpu.all.subarray(t * cpu.vocab, (t + 1) * cpu.vocab))) agree++;
      return agree / n;
    };
    // The default threshold (PREFILL_MIN_TOKENS: 4 tokens): chunks of 7, the last one of 4, all tiled.
    const sevens = await logits(gpuName, { precision: "fp16", prefillChunk: 7 }, ids);
    const exact = await logits(gpuName, { precision: "fp32", prefillChunk: 7 }, ids);
    expect(maxRowDiff(sevens.all, exact.all, exact.vocab)).toBeGreaterThan(1e-4);  // not the exact kernels
    expect(agreement(sevens, ids.length)).toBeGreaterThanOrEqual(0.995);
    expect(argmax(sevens.next)).toBe(argmax(cpu.next));
    // Every call tiled, one token at a time.
    const ones = await logits(gpuName, { precision: "fp16", prefillChunk: 1, prefillMinTokens: 1 }, ids.slice(0, 12));
    expect(agreement(ones, 12)).toBe(1);
  }, 120_000);

  test(`an fp16 prompt's logits of every row come from an exact lm_head (${gpuName})`, async () => {
    const model = await load(t1.modelDir, { backend: gpuName, threads: 1, fresh: true, precision: "fp16", prefillMinTokens: TILED_FROM });
    const r = await model.session().prefill(ids.slice(0, 40), { logits: "all", capture: ["final_norm"] });
    model.dispose();
    // The same normalised rows through the CPU backend's fp32 lm_head: fp32 accuracy (an fp16 product
    // is off by about 1e-3 of the largest logit).
    const cpu = await native().loadModel(t1.modelDir, { backend: "cpu", threads: 1 });
    const expected = await cpu.unembed(r.cache.get("final_norm").data, false);
    cpu.dispose();
    expect(maxRowDiff(r.logits.data, expected, r.logits.shape[1])).toBeLessThan(1e-5);
  });

  test(`prefillMinTokens picks the kernels of an fp16 prompt (${gpuName})`, async () => {
    const short = ids.slice(0, 20);
    const exact = await logits(gpuName, { precision: "fp32" }, short);
    const below = await logits(gpuName, { precision: "fp16", prefillMinTokens: 21 }, short);
    const tiled = await logits(gpuName, { precision: "fp16", prefillMinTokens: 20 }, short);
    // Below the threshold, the decode kernels: at fp16 their 4-bit products take int16 activations,
    // which move the logits far less than the tiled kernels' fp16 operands from it (measured here: 4.3e-4
    // and 1.5e-3 of a row's largest logit; 8e-4 lies between them by a factor of 1.9 either way).
    const belowDiff = maxRowDiff(below.all, exact.all, exact.vocab), tiledDiff = maxRowDiff(tiled.all, exact.all, exact.vocab);
    expect(belowDiff).toBeGreaterThan(0);
    expect(belowDiff).toBeLessThan(8e-4);
    expect(tiledDiff).toBeGreaterThan(8e-4);
  });

  test("prefillMinTokens is validated", async () => {
    await expect(load(t1.modelDir, { backend: gpuName, prefillMinTokens: 0 })).rejects.toThrow(/prefillMinTokens must be a whole number of tokens from 1/);
    await expect(load(t1.modelDir, { backend: gpuName, prefillMinTokens: 1.5 })).rejects.toThrow(/prefillMinTokens must be a whole number/);
    await expect(load(t1.modelDir, { backend: "cpu", prefillMinTokens: 16 })).rejects.toThrow(/option of the GPU backends/);
  });

  test("prefillChunk is validated", async () => {
    await expect(load(t1.modelDir, { prefillChunk: 0 })).rejects.toThrow(/prefillChunk must be a whole number of tokens from 1/);
    await expect(load(t1.modelDir, { prefillChunk: 2.5 })).rejects.toThrow(/prefillChunk must be a whole number/);
  });
});
