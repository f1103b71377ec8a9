// Decode attention over a long context on the GPU backend, end to end through the SDK: after a prompt of
// a few hundred tokens, each decoded token's attention is split over spans of the KV cache
// (ATTN_SPLIT_MIN_SPAN, shaders/params.h, is 16 keys: 9 spans after 130 tokens, the last one ragged) and
// the spans' partials are merged by the combine kernel. Against the CPU backend, one checkpoint per
// fixture: the fp32 precision (exact arithmetic; the prompt runs the split-K kernels in two spans) within
// 1e-4; and on one fixture the default fp16 precision (the prompt on the tiled kernels, then decode over
// 5 spans) within the 1e-2 accuracy target with the same top-1 wherever the CPU is confident (the
// emulator's tiled prefill is slow: a shorter prompt). With MOELENS_TEST_GPU_BACKEND (e.g. "cuda") the
// GPU side runs on that backend.
import { expect, test } from "vitest";
import { load } from "moelens";
import { fixtureCases, get } from "./helpers/fixtures";
import { argmax, confidence, maxRelDiff } from "./helpers/logits";
import { gpuBackend } from "./helpers/gpu-backend";

const backend = gpuBackend("emulator");

const DECODE = 3;

// The first checkpoint of each fixture (the layouts share the attention code).
const cases = fixtureCases().filter((c, i, all) => all.findIndex((d) => d.name.split("/")[0] === c.name.split("/")[0]) === i);

// Prefills `prompt` tokens (the fixture's first prompt repeated) on the CPU and on `backend` at
// `precision`, then decodes DECODE tokens fed the CPU's greedy choices; checks every step's logits.
async function decodeAfterPrompt(
  { modelDir, ref, prompts }: (typeof cases)[number],
  precision: "fp16" | "fp32",
  prompt: number,
  tolerance: number,
): Promise<void> {
  const [cpu, gpu] = await Promise.all([load(modelDir, { backend: "cpu", threads: 1 }), load(modelDir, { backend, precision })]);
  const base = Array.from(get(ref, `${prompts[0]}.input_ids`).data);
  const ids = Array.from({ length: prompt }, (_, i) => base[i % base.length]);
  const c = cpu.session();
  const g = gpu.session();
  const [pc, pg] = await Promise.all([c.prefill(ids), g.prefill(ids)]);
  expect(maxRelDiff(pg.logits.data, pc.logits.data), "prompt").toBeLessThanOrEqual(tolerance);
  let next = argmax(pc.logits.data);
  for (let step = 0; step < DECODE; step++) {
    const dc = (await c.decode(next)).logits.data;
    const dg = (await g.decode(next)).logits.data;
    expect(maxRelDiff(dg, dc), `decode step ${step}`).toBeLessThanOrEqual(tolerance);
    // fp32 differs from the CPU by rounding only (~1e-6): a near-tie below 1e-3 std may still flip.
    if (confidence(dc) > (precision === "fp32" ? 1e-3 : 0.01)) expect(argmax(dg), `decode step ${step}`).toBe(argmax(dc));
    next = argmax(dc);
  }
  cpu.dispose();
  gpu.dispose();
}

test.each(cases)(
  `$name: fp32 decoding after a 130-token prompt on ${backend} follows the CPU backend`,
  (fixture) => decodeAfterPrompt(fixture, "fp32", 130, 1e-4),
  120_000,
);

test(`${cases[0].name}: fp16 decoding after a 66-token prompt (tiled prefill) on ${backend} follows the CPU backend`, () =>
  decodeAfterPrompt(cases[0], "fp16", 66, 1e-2), 120_000);
