// Native session memory: reported to V8 (so dropped sessions are collected by their real size) and
// released at once by dispose().
import { expect, test } from "vitest";
import { load } from "moelens";
import { fixtureCases } from "./helpers/fixtures";

const t2 = fixtureCases().find((c) => c.name === "t2/mlx")!;

test("memoryBytes counts state, caches and work buffers; dispose frees the session", async () => {
  const model = await load(t2.modelDir);
  const s = model.session();
  const fresh = s.memoryBytes;
  const c = model.config;
  const deltanetLayers = c.layerTypes.filter((t) => t === "linear_attention").length;
  const convDim = 2 * c.linearKeyHeads * c.linearKeyDim + c.linearValueHeads * c.linearValueDim;
  const stateBytes = 4 * deltanetLayers * (c.linearValueHeads * c.linearKeyDim * c.linearValueDim + (c.convKernel - 1) * convDim);
  expect(fresh).toBe(stateBytes);
  await s.prefill(Array.from({ length: 40 }, (_, i) => i + 1));
  expect(s.memoryBytes).toBeGreaterThan(fresh); // KV cache and work buffers
  const fork = s.fork();
  expect(fork.memoryBytes).toBeGreaterThan(stateBytes);
  fork.dispose();
  expect(fork.memoryBytes).toBe(0);
  expect(() => fork.fork()).toThrow(/disposed/);
  await expect(fork.decode(1)).rejects.toThrow(/disposed/);
  // The parent is unaffected.
  expect((await s.decode(5)).logits.shape).toEqual([1, c.vocabSize]);
});

test("dropped sessions do not accumulate native memory", async () => {
  const model = await load(t2.modelDir);
  const s = model.session();
  await s.prefill(Array.from({ length: 300 }, (_, i) => (i * 7) % 2000));
  const perFork = s.fork().memoryBytes;
  const rss = () => process.memoryUsage().rss;
  const settle = () => new Promise((r) => setTimeout(r, 20));
  for (let i = 0; i < 200; i++) s.fork();
  await settle();
  const base = rss();
  // 1,000 more forks dropped in rounds: without the size reported to V8 they would pile up.
  for (let round = 0; round < 5; round++) {
    for (let i = 0; i < 200; i++) s.fork();
    await settle();
  }
  // Kept alive, the 1,000 forks would take 1000 × perFork, well over this bound.
  expect(rss() - base).toBeLessThan(200 * perFork * 2);
});
