// The sampler, statistically: greedy at temperature 0, top-k / top-p / min-p never leave their set,
// frequencies follow the softmax, a seed reproduces, ids past the vocabulary are never picked.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { loadGenerationConfig, Sampler } from "moelens";
import { Prng } from "../sdk/generate/prng";
import { StopStrings } from "../sdk/generate/stop-strings";
import { resolveSampling } from "../sdk/generate/generate";

function randomLogits(n: number, seed: number, scale = 3): Float32Array {
  const rng = new Prng(seed);
  return Float32Array.from({ length: n }, () => (rng.next() * 2 - 1) * scale);
}

function softmax(logits: ArrayLike<number>, temperature = 1): number[] {
  const max = Math.max(...Array.from(logits));
  const e = Array.from(logits, (x) => Math.exp((x - max) / temperature));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / z);
}

function counts(sampler: Sampler, logits: Float32Array, draws: number): Map<number, number> {
  const c = new Map<number, number>();
  for (let i = 0; i < draws; i++) {
    const id = sampler.sample(logits);
    c.set(id, (c.get(id) ?? 0) + 1);
  }
  return c;
}

// |observed - expected| within 5 standard deviations of a binomial count: fails only on a real bias.
function expectFrequencies(c: Map<number, number>, probs: Map<number, number>, draws: number): void {
  for (const [id, p] of probs) {
    const sd = Math.sqrt(draws * p * (1 - p));
    expect(Math.abs((c.get(id) ?? 0) - draws * p), `token ${id}`).toBeLessThanOrEqual(5 * sd + 1);
  }
  for (const id of c.keys()) expect(probs.has(id), `token ${id} was not allowed`).toBe(true);
}

const log = (ps: number[]) => Float32Array.from(ps, Math.log);

describe("Sampler", () => {
  it("temperature 0 equals greedy (argmax, lowest id on ties), whatever the seed", () => {
    for (let s = 0; s < 50; s++) {
      const logits = randomLogits(500, s);
      const best = logits.indexOf(Math.max(...logits));
      expect(new Sampler({ temperature: 0, seed: s }).sample(logits)).toBe(best);
      expect(new Sampler({ temperature: 0, topK: 3, topP: 0.1, seed: s + 1 }).sample(logits)).toBe(best);
    }
    expect(new Sampler({ temperature: 0 }).sample(Float32Array.from([1, 5, 5, 2]))).toBe(1);
  });

  it("follows the softmax at temperature 1 and a flatter one at temperature 2", () => {
    const logits = Float32Array.from([2, 1, 0.5, 0, -1]);
    const draws = 20000;
    for (const t of [1, 2]) {
      const p = softmax(logits, t);
      const c = counts(new Sampler({ temperature: t, seed: 7 }), logits, draws);
      expectFrequencies(c, new Map(p.map((v, i) => [i, v])), draws);
    }
  });

  it("top-k never leaves the k most likely tokens, and samples them by their renormalised probability", () => {
    const draws = 20000;
    for (const seed of [1, 2, 3]) {
      const logits = randomLogits(1000, seed, 2);
      const order = [...logits.keys()].sort((a, b) => logits[b] - logits[a]);
      const top = order.slice(0, 5);
      const p = softmax(top.map((i) => logits[i]), 1.5);
      const c = counts(new Sampler({ temperature: 1.5, topK: 5, seed }), logits, draws);
      expectFrequencies(c, new Map(top.map((id, j) => [id, p[j]])), draws);
    }
  });

  it("top-p keeps the smallest set reaching p", () => {
    const logits = log([0.05, 0.5, 0.1, 0.3, 0.05]);
    const draws = 20000;
    expectFrequencies(counts(new Sampler({ topP: 0.8, seed: 3 }), logits, draws), new Map([[1, 0.625], [3, 0.375]]), draws);
    const three = counts(new Sampler({ topP: 0.85, seed: 4 }), logits, draws);
    expectFrequencies(three, new Map([[1, 0.5 / 0.9], [3, 0.3 / 0.9], [2, 0.1 / 0.9]]), draws);
    // Combined with top-k on a large vocabulary: the set is the intersection.
    const big = randomLogits(50000, 9, 6);
    const order = [...big.keys()].sort((a, b) => big[b] - big[a]);
    const allowed = new Set(order.slice(0, 40));
    for (let i = 0; i < 300; i++) expect(allowed.has(new Sampler({ topK: 40, topP: 0.9, seed: i }).sample(big))).toBe(true);
  });

  it("min-p drops tokens below minP times the most likely one", () => {
    const logits = log([0.5, 0.3, 0.1, 0.05, 0.05]);
    const draws = 20000;
    const c = counts(new Sampler({ minP: 0.25, seed: 5 }), logits, draws);
    expectFrequencies(c, new Map([[0, 0.625], [1, 0.375]]), draws);
  });

  it("never picks ids at or past the tokenizer's vocabulary", () => {
    const logits = Float32Array.from([0, 1, 2, 9, 9]);
    expect(new Sampler({ temperature: 0 }, 3).sample(logits)).toBe(2);
    const c = counts(new Sampler({ temperature: 5, seed: 1 }, 3), logits, 5000);
    expect([...c.keys()].every((id) => id < 3)).toBe(true);
  });

  it("reproduces a draw sequence from its seed", () => {
    const logits = randomLogits(2000, 11, 1);
    const run = (seed: number) => {
      const s = new Sampler({ temperature: 1, topP: 0.95, seed });
      return Array.from({ length: 200 }, () => s.sample(logits));
    };
    expect(run(42)).toEqual(run(42));
    expect(run(42)).not.toEqual(run(43));
    expect(new Sampler().seed).not.toBe(new Sampler().seed); // unseeded: random
  });

  it("applies repetition, presence and frequency penalties", () => {
    const logits = Float32Array.from([2, 1.9, -1]);
    const greedy = (o: ConstructorParameters<typeof Sampler>[0], prompt: number[], generated: number[]) =>
      new Sampler({ temperature: 0, ...o }).sample(logits, { prompt, generated });
    expect(greedy({}, [0], [0])).toBe(0);
    expect(greedy({ repetitionPenalty: 1.2 }, [0], [])).toBe(1); // 2 / 1.2 < 1.9
    expect(greedy({ repetitionPenalty: 1.2 }, [], [0])).toBe(1);
    expect(greedy({ presencePenalty: 0.2 }, [0], [])).toBe(0); // presence looks at generated tokens only
    expect(greedy({ presencePenalty: 0.2 }, [], [0])).toBe(1);
    expect(greedy({ frequencyPenalty: 0.06 }, [], [0])).toBe(0); // 2 - 0.06 > 1.9
    expect(greedy({ frequencyPenalty: 0.06 }, [], [0, 0])).toBe(1); // 2 - 0.12 < 1.9
    // A negative logit is multiplied, so it gets less likely too.
    const neg = Float32Array.from([-1, -1.1]);
    expect(new Sampler({ temperature: 0, repetitionPenalty: 1.2 }).sample(neg, { prompt: [0], generated: [] })).toBe(1);
  });

  it("rejects bad options, naming them", () => {
    expect(() => new Sampler({ temperature: -1 })).toThrow(/temperature/);
    expect(() => new Sampler({ topK: 1.5 })).toThrow(/topK/);
    expect(() => new Sampler({ topP: 0 })).toThrow(/topP/);
    expect(() => new Sampler({ minP: 2 })).toThrow(/minP/);
    expect(() => new Sampler({ repetitionPenalty: 0 })).toThrow(/repetitionPenalty/);
    expect(() => new Sampler({ seed: 0.5 })).toThrow(/seed/);
    expect(() => new Sampler({ temperature: NaN })).toThrow(/temperature/);
  });
});

describe("resolveSampling", () => {
  it("lays the caller's options over the checkpoint's, and top-k/p or min-p alone mean sampling", () => {
    const sampled = { temperature: 0.7, topK: 20, topP: 0.95 };
    expect(resolveSampling(sampled, { topK: 5 })).toEqual({ temperature: 0.7, topK: 5, topP: 0.95 });
    expect(resolveSampling(sampled, { temperature: 0 })).toEqual({ temperature: 0, topK: 20, topP: 0.95 });
    const greedy = { temperature: 0 };
    expect(resolveSampling(greedy, { seed: 3 })).toEqual({ temperature: 0, seed: 3 });
    expect(resolveSampling(greedy, { topP: 0.9 })).toEqual({ temperature: 1, topP: 0.9 });
    expect(resolveSampling(greedy, { minP: 0.1, temperature: 0 })).toEqual({ temperature: 0, minP: 0.1 });
  });
});

describe("StopStrings", () => {
  it("holds back a possible start of a stop string and cuts at the first one", () => {
    const s = new StopStrings(["\n\n", "END"]);
    expect(s.push("Hello E")).toEqual({ text: "Hello ", stopped: false });
    expect(s.push("Nx")).toEqual({ text: "ENx", stopped: false });
    expect(s.push(" a\n")).toEqual({ text: " a", stopped: false });
    expect(s.push("\nmore")).toEqual({ text: "", stopped: true });
    const t = new StopStrings(["yy", "END"]);
    expect(t.push("xxENDyy")).toEqual({ text: "xx", stopped: true }); // the earliest match wins, not the first listed
    const u = new StopStrings(["abc"]);
    expect(u.push("xab")).toEqual({ text: "x", stopped: false });
    expect(u.flush()).toBe("ab");
    expect(() => new StopStrings([""])).toThrow(/non-empty/);
  });
});

describe("generation config", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-gencfg-"));
  const write = (o: unknown) => fs.writeFileSync(path.join(dir, "generation_config.json"), JSON.stringify(o));

  it("reads eos ids and sampling defaults, greedy unless do_sample", () => {
    write({ eos_token_id: [248046, 248044], do_sample: true, temperature: 0.6, top_k: 20, top_p: 0.95 });
    expect(loadGenerationConfig(dir, [1])).toMatchObject({
      eosTokenIds: [248046, 248044],
      sampling: { temperature: 0.6, topK: 20, topP: 0.95 },
    });
    write({ eos_token_id: 7, temperature: 0.6 });
    expect(loadGenerationConfig(dir, [1])).toMatchObject({ eosTokenIds: [7], sampling: { temperature: 0 } });
    write({});
    expect(loadGenerationConfig(dir, [1, 2, 1]).eosTokenIds).toEqual([1, 2]);
    write({ eos_token_id: "x" });
    expect(() => loadGenerationConfig(dir, [])).toThrow(/generation_config\.json: eos_token_id/);
    fs.rmSync(path.join(dir, "generation_config.json"));
    expect(loadGenerationConfig(dir, [5])).toEqual({ eosTokenIds: [5], sampling: { temperature: 0 }, source: undefined });
  });
});
