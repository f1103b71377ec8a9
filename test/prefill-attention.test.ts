// Prefill attention on the GPU backend's flash-attention kernels, end to end through the SDK: the
// emulator backend at precision "fp16" (prefill chunks of at least TILED_FROM tokens run the tiled
// kernels, fp16 operands with fp32 accumulation) against the CPU backend on every fixture. A prompt is
// prefilled in two chunks, the second continuing the KV cache of the first, then decoded. With
// MOELENS_TEST_GPU_BACKEND (e.g. "cuda") the GPU side runs on that backend.
import { expect, test } from "vitest";
import { load } from "moelens";
import { fixtureCases, get } from "./helpers/fixtures";
import { argmax, confidence, maxRelDiff } from "./helpers/logits";
import { gpuBackend, TILED_FROM } from "./helpers/gpu-backend";

const backend = gpuBackend("emulator");

// Both chunks are long enough for the tiled kernels (from TILED_FROM tokens: the prefillMinTokens of the load).
const FIRST = TILED_FROM;
const SECOND = TILED_FROM + 1;
const DECODE = 3;

test.each(fixtureCases())(
  `$name: fp16 prefill logits on ${backend} and the decoding after them follow the CPU backend`,
  async ({ modelDir, ref, prompts }) => {
    const [cpu, gpu, exact] = await Promise.all([
      load(modelDir, { backend: "cpu", threads: 1 }),
      load(modelDir, { backend, precision: "fp16", prefillMinTokens: TILED_FROM }),
      load(modelDir, { backend, precision: "fp32" }),
    ]);
    const vocab = cpu.config.vocabSize;
    const ids = Array.from(get(ref, `${prompts[0]}.input_ids`).data).slice(0, FIRST + SECOND);
    expect(ids.length).toBe(FIRST + SECOND);
    const logits = async (model: typeof cpu) => {
      const s = model.session();
      const a = await s.prefill(ids.slice(0, FIRST), { logits: "all" });
      const b = await s.prefill(ids.slice(FIRST), { logits: "all" });
      const all = new Float32Array((FIRST + SECOND) * vocab);
      all.set(a.logits.data);
      all.set(b.logits.data, FIRST * vocab);
      return { session: s, all };
    };
    const c = await logits(cpu);
    const g = await logits(gpu);
    const x = await logits(exact);

    // Teacher-forced top-1 wherever the CPU's top-2 gap exceeds 1 % of the logits' standard deviation. A
    // flip at a near-tie is allowed here (one of 33 positions is 3 %); the >= 99.5 % rate is held over
    // 256 positions on the GPU (moelens-gpu-bench agree).
    let agree = 0;
    for (let t = 0; t < ids.length; t++) {
      const rc = c.all.subarray(t * vocab, (t + 1) * vocab);
      const same = argmax(g.all.subarray(t * vocab, (t + 1) * vocab)) === argmax(rc);
      if (same) agree++;
      else expect(confidence(rc), `position ${t}: top-1 differs where the CPU is confident`).toBeLessThanOrEqual(0.01);
    }
    expect(agree / ids.length).toBeGreaterThan(0.9);
    // Within the fp16 accuracy target, and not the exact kernels (those match the CPU to ~1e-6).
    const fp16Error = maxRelDiff(g.all, c.all);
    expect(fp16Error).toBeLessThanOrEqual(1e-2);
    expect(maxRelDiff(x.all, c.all)).toBeLessThan(1e-4);
    expect(fp16Error).toBeGreaterThan(maxRelDiff(x.all, c.all));

    // Decoding continues from the cache both prefill chunks left, fed the CPU's greedy tokens: logits
    // within the accuracy target, the same choice wherever the CPU is confident.
    let next = argmax(c.all.subarray((ids.length - 1) * vocab));
    for (let step = 0; step < DECODE; step++) {
      const dc = (await c.session.decode(next)).logits.data;
      const dg = (await g.session.decode(next)).logits.data;
      expect(maxRelDiff(dg, dc), `decode step ${step}`).toBeLessThanOrEqual(1e-2);
      if (confidence(dc) > 0.01) expect(argmax(dg), `decode step ${step}`).toBe(argmax(dc));
      next = argmax(dc);
    }
    for (const m of [cpu, gpu, exact]) m.dispose();
  },
  120_000,
);
