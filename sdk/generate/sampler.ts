// Picks the next token from a row of logits: penalties, then greedy (temperature 0) or sampling with
// temperature, top-k, top-p and min-p, from a seeded PRNG. Ids at or past `vocabLimit` (the
// embedding's padding rows, which the tokenizer does not define) are never picked.
import { randomInt } from "node:crypto";
import { Prng } from "./prng";

export interface SamplerOptions {
  /** 0 picks the most likely token (greedy); higher flattens the distribution (default 1). */
  temperature?: number;
  /** Keep only the k most likely tokens (0 = off, the default). */
  topK?: number;
  /** Keep the smallest set of most likely tokens whose probability reaches p (1 = off, the default). */
  topP?: number;
  /** Drop tokens less likely than minP times the most likely one (0 = off, the default). */
  minP?: number;
  /** Divide positive logits (multiply negative ones) of tokens already in the prompt or output (1 = off). */
  repetitionPenalty?: number;
  /** Subtract from the logits of tokens already generated, once (0 = off). */
  presencePenalty?: number;
  /** Subtract from the logits of tokens already generated, once per occurrence (0 = off). */
  frequencyPenalty?: number;
  /** Seed of the random draws: the same seed gives the same tokens for the same logits (default: random). */
  seed?: number;
}

/** What the penalties look at. */
export interface SamplingContext {
  prompt: readonly number[];
  generated: readonly number[];
}

export class Sampler {
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly minP: number;
  readonly repetitionPenalty: number;
  readonly presencePenalty: number;
  readonly frequencyPenalty: number;
  readonly seed: number;
  private readonly rng: Prng;

  /** @param vocabLimit ids >= this are masked (the tokenizer's vocabulary size) */
  constructor(
    options: SamplerOptions = {},
    readonly vocabLimit = Infinity,
  ) {
    this.temperature = check("temperature", options.temperature ?? 1);
    this.topK = check("topK", options.topK ?? 0);
    this.topP = check("topP", options.topP ?? 1);
    this.minP = check("minP", options.minP ?? 0);
    this.repetitionPenalty = check("repetitionPenalty", options.repetitionPenalty ?? 1);
    this.presencePenalty = check("presencePenalty", options.presencePenalty ?? 0);
    this.frequencyPenalty = check("frequencyPenalty", options.frequencyPenalty ?? 0);
    this.seed = check("seed", options.seed ?? randomSeed());
    this.rng = new Prng(this.seed);
  }

  /** The next token id. */
  sample(logits: Float32Array, context: SamplingContext = { prompt: [], generated: [] }): number {
    const n = Math.min(logits.length, this.vocabLimit);
    if (n <= 0) throw new RangeError("sample: no logits");
    const x = this.penalised(logits.subarray(0, n), context);
    if (this.temperature === 0) return argmax(x);
    return this.draw(x);
  }

  private penalised(logits: Float32Array, context: SamplingContext): Float32Array {
    const rep = this.repetitionPenalty;
    const pres = this.presencePenalty;
    const freq = this.frequencyPenalty;
    if (rep === 1 && pres === 0 && freq === 0) return logits;
    const x = Float32Array.from(logits);
    const n = x.length;
    if (rep !== 1) {
      const seen = new Set<number>();
      for (const id of context.prompt) seen.add(id);
      for (const id of context.generated) seen.add(id);
      for (const id of seen) if (id < n) x[id] = x[id] > 0 ? x[id] / rep : x[id] * rep;
    }
    if (pres !== 0 || freq !== 0) {
      const counts = new Map<number, number>();
      for (const id of context.generated) counts.set(id, (counts.get(id) ?? 0) + 1);
      for (const [id, c] of counts) if (id < n) x[id] -= pres + freq * c;
    }
    return x;
  }

  private draw(x: Float32Array): number {
    const n = x.length;
    const max = x[argmax(x)];
    if (!Number.isFinite(max)) throw new RangeError("sample: every logit is -Infinity or NaN");
    // Unnormalised probabilities; the most likely token has weight 1.
    // Weights under e^-60 are below double rounding next to the top token's 1: skip the exp.
    const cutoff = max - 60 * this.temperature;
    const weight = (i: number) => (x[i] > cutoff ? Math.exp((x[i] - max) / this.temperature) : 0); // NaN > c is false
    let candidates: number[] | undefined; // undefined: every id
    let weights: Float64Array;
    if (this.topK > 0 && this.topK < n) {
      candidates = topKIndices(x, this.topK);
      weights = Float64Array.from(candidates, weight);
    } else {
      weights = new Float64Array(n);
      for (let i = 0; i < n; i++) weights[i] = weight(i);
    }
    if (this.topP < 1) [candidates, weights] = nucleus(candidates, weights, this.topP);
    if (this.minP > 0) {
      const keep: number[] = [];
      for (let j = 0; j < weights.length; j++) if (weights[j] >= this.minP) keep.push(j);
      candidates = keep.map((j) => (candidates ? candidates[j] : j));
      weights = Float64Array.from(keep, (j) => weights[j]);
    }
    let total = 0;
    for (const w of weights) total += w;
    let r = this.rng.next() * total;
    for (let j = 0; j < weights.length; j++) {
      r -= weights[j];
      if (r < 0) return candidates ? candidates[j] : j;
    }
    // Rounding left r at or just above 0: take the last token with any weight.
    for (let j = weights.length - 1; j >= 0; j--) if (weights[j] > 0) return candidates ? candidates[j] : j;
    throw new Error("sample: no candidate token has a probability");
  }
}

/** Index of the largest logit; the lowest index wins ties; NaN is never picked. */
export function argmax(x: Float32Array): number {
  let best = -1;
  let bestValue = -Infinity;
  for (let i = 0; i < x.length; i++) {
    if (x[i] > bestValue || (best < 0 && x[i] === bestValue)) {
      best = i;
      bestValue = x[i];
    }
  }
  if (best < 0) throw new RangeError("sample: every logit is NaN");
  return best;
}

// Indices of the k largest values, by descending value (ties: lower index first), with a min-heap.
function topKIndices(x: Float32Array, k: number): number[] {
  const heap: number[] = []; // indices; heap[0] is the smallest kept
  const value = (i: number) => (x[i] === x[i] ? x[i] : -Infinity); // NaN ranks last
  const less = (a: number, b: number) => value(a) < value(b) || (value(a) === value(b) && a > b);
  const swap = (i: number, j: number) => ([heap[i], heap[j]] = [heap[j], heap[i]]);
  for (let i = 0; i < k; i++) {
    heap.push(i);
    for (let c = i; c > 0 && less(heap[c], heap[(c - 1) >> 1]); c = (c - 1) >> 1) swap(c, (c - 1) >> 1);
  }
  let floor = value(heap[0]);
  for (let i = k; i < x.length; i++) {
    // Later ids lose ties, so only a strictly larger value enters (NaN never does).
    if (!(x[i] > floor)) continue;
    heap[0] = i;
    for (let p = 0; ; ) {
      const l = 2 * p + 1;
      const r = l + 1;
      let m = p;
      if (l < k && less(heap[l], heap[m])) m = l;
      if (r < k && less(heap[r], heap[m])) m = r;
      if (m === p) break;
      swap(p, m);
      p = m;
    }
    floor = value(heap[0]);
  }
  return heap.sort((a, b) => (less(a, b) ? 1 : less(b, a) ? -1 : 0));
}

// The smallest set of most likely tokens holding `p` of the mass (ties at the edge: lower ids
// first). Tokens lighter than (1 - p) * total / n cannot be in it (together they hold less than
// 1 - p), so only the others are sorted, as plain numbers (a typed-array sort is fast).
function nucleus(
  candidates: number[] | undefined,
  weights: Float64Array,
  p: number,
): [number[], Float64Array] {
  let total = 0;
  for (const w of weights) total += w;
  const floor = ((1 - p) * total) / weights.length;
  let heavy = 0;
  for (const w of weights) if (w >= floor) heavy++;
  const sorted = new Float64Array(heavy);
  heavy = 0;
  for (const w of weights) if (w >= floor) sorted[heavy++] = w;
  sorted.sort();
  // The lightest weight the set needs, and how much mass the heavier ones already hold.
  let above = 0;
  let edge = sorted[sorted.length - 1];
  for (let j = sorted.length - 1; j >= 0; j--) {
    edge = sorted[j];
    if (above + edge >= p * total) break;
    above += edge;
  }
  const kept: number[] = [];
  let sum = 0;
  for (let j = 0; j < weights.length; j++) {
    if (weights[j] > edge) {
      kept.push(j);
      sum += weights[j];
    }
  }
  for (let j = 0; j < weights.length && sum < p * total; j++) {
    if (weights[j] === edge) {
      kept.push(j);
      sum += weights[j];
    }
  }
  return [kept.map((j) => (candidates ? candidates[j] : j)), Float64Array.from(kept, (j) => weights[j])];
}

/** What each sampling option accepts; the command line checks its flags against the same rules. */
export const SAMPLING_RULES: Record<keyof SamplerOptions, { ok: (v: number) => boolean; what: string }> = {
  temperature: { ok: (v) => v >= 0, what: "a number >= 0" },
  topK: { ok: (v) => Number.isInteger(v) && v >= 0, what: "an integer >= 0" },
  topP: { ok: (v) => v > 0 && v <= 1, what: "a number in (0, 1]" },
  minP: { ok: (v) => v >= 0 && v <= 1, what: "a number in [0, 1]" },
  repetitionPenalty: { ok: (v) => v > 0, what: "a number > 0" },
  presencePenalty: { ok: () => true, what: "a number" },
  frequencyPenalty: { ok: () => true, what: "a number" },
  seed: { ok: Number.isSafeInteger, what: "an integer" },
};

function check(name: keyof SamplerOptions, value: number): number {
  const rule = SAMPLING_RULES[name];
  if (typeof value !== "number" || !Number.isFinite(value) || !rule.ok(value)) {
    throw new RangeError(`sampling option ${name} must be ${rule.what}, got ${value}`);
  }
  return value;
}

function randomSeed(): number {
  return randomInt(2 ** 32);
}
