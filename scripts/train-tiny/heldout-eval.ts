// Held-out perplexity and routing statistics of a model on the held-out token file that
// scripts/train-tiny/train.py writes (test/data/heldout-tiny.json), computed by our engine with the
// same definitions train.py uses with transformers: each segment starts a fresh session, its first
// token is context only, perplexity = exp(total NLL / predicted tokens); an expert's share = the
// fraction of positions whose top-k contains it.
import * as fs from "node:fs";
import type { Model } from "../../sdk";

export type Layout = "hf_bf16" | "mlx_dequant_fp32";

export interface HeldoutSegment {
  domain: string;
  genre: string;
  source: string;
  ids: number[];
}

export interface HeldoutFile {
  segments: HeldoutSegment[];
  /** transformers' figures on these segments, per checkpoint layout. */
  transformers: Record<Layout, { ppl: number; nll_sum: number; tokens: number }>;
}

export function readHeldout(file: string): HeldoutFile {
  const j = JSON.parse(fs.readFileSync(file, "utf8")) as HeldoutFile;
  if (!Array.isArray(j.segments) || j.segments.length === 0) throw new Error(`${file}: no 'segments'`);
  for (const [i, s] of j.segments.entries()) {
    if (typeof s.domain !== "string" || !Array.isArray(s.ids) || s.ids.length < 2) {
      throw new Error(`${file}: segments[${i}] needs a 'domain' and at least 2 'ids'`);
    }
  }
  for (const layout of ["hf_bf16", "mlx_dequant_fp32"] as const) {
    if (!(j.transformers?.[layout]?.ppl > 0)) throw new Error(`${file}: missing 'transformers.${layout}.ppl'`);
  }
  return j;
}

export interface HeldoutResult {
  ppl: number;
  nllSum: number;
  /** Predicted tokens (all ids but each segment's first). */
  tokens: number;
  perDomain: Record<string, { ppl: number; tokens: number }>;
  /** [layer][expert] how many positions routed to the expert, per segment. */
  expertCounts: number[][][];
  /** Positions per segment (ids.length). */
  positions: number[];
}

/** -log softmax(logits)[target], in float64. */
function nll(logits: Float32Array, target: number): number {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  return Math.log(sum) + max - logits[target];
}

export async function evaluateHeldout(model: Model, segments: HeldoutSegment[]): Promise<HeldoutResult> {
  const { vocabSize: V, numLayers: L, numExperts: E, expertsPerToken: K } = model.config;
  let nllSum = 0;
  let tokens = 0;
  const domains: Record<string, { nll: number; tokens: number }> = {};
  const expertCounts: number[][][] = [];
  for (const seg of segments) {
    const r = await model.session().prefill(seg.ids, { logits: "all", capture: ["router"] });
    let segNll = 0;
    for (let t = 0; t + 1 < seg.ids.length; t++) segNll += nll(r.logits.data.subarray(t * V, (t + 1) * V), seg.ids[t + 1]);
    const d = (domains[seg.domain] ??= { nll: 0, tokens: 0 });
    d.nll += segNll;
    d.tokens += seg.ids.length - 1;
    nllSum += segNll;
    tokens += seg.ids.length - 1;
    const counts = Array.from({ length: L }, () => new Array<number>(E).fill(0));
    const ids = r.router!.ids.data;
    const T = seg.ids.length;
    for (let l = 0; l < L; l++) for (let i = l * T * K; i < (l + 1) * T * K; i++) counts[l][ids[i]]++;
    expertCounts.push(counts);
  }
  const perDomain: HeldoutResult["perDomain"] = {};
  for (const [name, d] of Object.entries(domains)) perDomain[name] = { ppl: Math.exp(d.nll / d.tokens), tokens: d.tokens };
  return { ppl: Math.exp(nllSum / tokens), nllSum, tokens, perDomain, expertCounts, positions: segments.map((s) => s.ids.length) };
}

/** [layer][expert] share of positions (of the chosen segments) whose top-k holds the expert. */
export function expertShares(result: HeldoutResult, which: number[]): number[][] {
  const L = result.expertCounts[0].length;
  const E = result.expertCounts[0][0].length;
  const positions = which.reduce((a, i) => a + result.positions[i], 0);
  return Array.from({ length: L }, (_, l) =>
    Array.from({ length: E }, (_, e) => which.reduce((a, i) => a + result.expertCounts[i][l][e], 0) / positions),
  );
}

/** Total-variation distance between two expert-load distributions (0 = identical, 1 = disjoint). */
export function totalVariation(a: number[], b: number[]): number {
  const sa = a.reduce((x, y) => x + y, 0);
  const sb = b.reduce((x, y) => x + y, 0);
  return 0.5 * a.reduce((acc, x, i) => acc + Math.abs(x / sa - b[i] / sb), 0);
}

/** Mean over layers of the TV distance between the loads of two sets of segments. */
export function meanRoutingDistance(result: HeldoutResult, a: number[], b: number[]): number {
  const sa = expertShares(result, a);
  const sb = expertShares(result, b);
  return sa.reduce((acc, row, l) => acc + totalVariation(row, sb[l]), 0) / sa.length;
}
