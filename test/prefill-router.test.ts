// The router and the expert buckets of prompts on the GPU backend's tiled path (fp16 precision: the
// router's logits on the exact fp32 GEMM, the experts on the counting sort and the grouped GEMMs), end
// to end on the CPU emulator (and on a Mac's GPU; or on MOELENS_TEST_GPU_BACKEND, e.g. "cuda"), against the CPU backend: the chosen experts of every
// layer and token, their weights, and the logits of every position. Two MoE fixtures, one per router
// format (t1/mlx: MLX affine 8-bit, as the real checkpoint; t3/hf: bf16, top-2), each on its longest
// prompt cut to TILED_FROM + 4 tokens: the emulator runs the fp16 path's grouped GEMMs lane by
// lane, about 20 s per fixture on one core.
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, test } from "vitest";
import { load } from "moelens";
import { type FixtureCase, fixtureCases, get } from "./helpers/fixtures";
import { promptPathBackends, TILED_FROM } from "./helpers/gpu-backend";


function argmax(row: Float32Array): number {
  let b = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[b]) b = i;
  return b;
}

function std(row: Float32Array): number {
  let sum = 0;
  let sum2 = 0;
  for (const v of row) (sum += v), (sum2 += v * v);
  const mean = sum / row.length;
  return Math.sqrt(Math.max(0, sum2 / row.length - mean * mean));
}

// The gap between a row's k-th and (k+1)-th largest values: how far the top-k choice is from a tie.
function topKMargin(row: Float32Array, k: number): number {
  const sorted = Float32Array.from(row).sort().reverse();
  return k < sorted.length ? sorted[k - 1] - sorted[k] : Infinity;
}

const promptTokens = TILED_FROM + 4;
const promptLength = (c: FixtureCase, p: string) => get(c.ref, `${p}.input_ids`).data.length;
const routerFixtures = ["t1/mlx", "t3/hf"];
const fixtures = fixtureCases()
  .filter((c) => routerFixtures.includes(c.name))
  .map((c) => ({ ...c, prompts: [...c.prompts].sort((x, y) => promptLength(c, y) - promptLength(c, x)).slice(0, 1) }))
  .filter((c) => promptLength(c, c.prompts[0]) > TILED_FROM);
const backends = promptPathBackends();
const cases = backends.flatMap((backend) => fixtures.map((f) => ({ ...f, backend })));

test("the MoE fixtures have prompts on the tiled path", () => {
  expect(fixtures.map((f) => f.name)).toEqual(routerFixtures);
  for (const f of fixtures) expect(fs.readFileSync(path.join(f.modelDir, "config.json"), "utf8"), f.name).toMatch(/"num_experts"\s*:\s*[1-9]/);
});

describe.each(cases)("router and experts of a prompt on $backend (fp16), $name", ({ modelDir, ref, prompts, backend }) => {
  test("every layer and token chooses the CPU backend's experts; the logits follow", async () => {
    const [cpu, gpu] = await Promise.all([load(modelDir, { backend: "cpu", threads: 1 }), load(modelDir, { backend, precision: "fp16", prefillMinTokens: TILED_FROM })]);
    expect(gpu.info.precision).toBe("fp16");
    const vocab = cpu.config.vocabSize;
    const ids = Array.from(get(ref, `${prompts[0]}.input_ids`).data).slice(0, promptTokens);
    const rc = await cpu.session().prefill(ids, { logits: "all", capture: ["router"] });
    const rg = await gpu.session().prefill(ids, { logits: "all", capture: ["router"] });
    const c = rc.router!;
    const g = rg.router!;
    expect([g.layers, g.tokens, g.k, g.experts]).toEqual([c.layers, c.tokens, c.k, c.experts]);

    // The router's input passed through the layers' fp16 projections (3e-3 of the output's scale in
    // moelens-gpu-check), so a choice may flip only where the CPU's k-th and (k+1)-th logits are that
    // close: a margin under 1 % of the row's logits' std. Everywhere else the same experts (their order,
    // by weight, may swap two near-equal weights), each with its weight within 1e-2.
    let same = 0;
    const confidentMisses: string[] = [];
    for (let layer = 0; layer < c.layers; layer++) {
      for (let t = 0; t < c.tokens; t++) {
        const row = c.logits.data.subarray((layer * c.tokens + t) * c.experts, (layer * c.tokens + t + 1) * c.experts);
        const want = c.chosen(layer, t).sort((a, b) => a.expert - b.expert);
        const got = g.chosen(layer, t).sort((a, b) => a.expert - b.expert);
        const equal = want.every((w, s) => w.expert === got[s].expert);
        if (equal) {
          same++;
          for (let s = 0; s < c.k; s++)
            expect(Math.abs(got[s].weight - want[s].weight), `layer ${layer} token ${t} expert ${want[s].expert} weight`).toBeLessThanOrEqual(1e-2);
        } else if (topKMargin(row, c.k) > 0.01 * std(row)) {
          confidentMisses.push(`layer ${layer} token ${t}: cpu ${want.map((w) => w.expert)}, gpu ${got.map((w) => w.expert)}`);
        }
      }
    }
    expect(confidentMisses, "choices that differ although the CPU's are not near a tie").toEqual([]);
    expect(same / (c.layers * c.tokens), "rows with the same experts").toBeGreaterThanOrEqual(0.99);

    // The buckets' results reach the logits: top-1 of every position where the CPU's top-2 gap exceeds
    // 1 % of the logits' std.
    for (let r = 0; r < ids.length; r++) {
      const cpuRow = rc.logits.data.subarray(r * vocab, (r + 1) * vocab);
      const gpuRow = rg.logits.data.subarray(r * vocab, (r + 1) * vocab);
      if (topKMargin(cpuRow, 1) > 0.01 * std(cpuRow)) expect(argmax(gpuRow), `position ${r} top-1`).toBe(argmax(cpuRow));
    }
    cpu.dispose();
    gpu.dispose();
  }, 300_000);
});
