// Two prompts side by side: their next-token distributions, and where their routing differs.
import { softmax } from "../logits/softmax";
import { rowValues, type LogitsRow } from "../logits/rows";
import type { ExpertLoad } from "../trace/expert-load";
import type { RouterTrace } from "../trace/router";
import { seriesColor } from "./colors";
import { Figure } from "./figure";
import { compact, plotlyText, visibleToken, type TokenDecoder } from "./labels";

export interface CompareOptions {
  /** Names of the two sides (default "A", "B"). */
  names?: [string, string];
  title?: string;
}

/** ½ Σ |p − q|: 0 for equal distributions, 1 for disjoint ones. */
function totalVariation(p: ArrayLike<number>, q: ArrayLike<number>): number {
  let d = 0;
  for (let i = 0; i < p.length; i++) d += Math.abs(p[i] - q[i]);
  return d / 2;
}

/**
 * The next-token probabilities after two prompts (one logits row each): grouped bars over the union
 * of each side's `top` most likely tokens, with the total variation distance in the title.
 */
export function compareLogits(a: LogitsRow, b: LogitsRow, options: CompareOptions & { tokenizer?: TokenDecoder; top?: number } = {}): Figure {
  const [nameA, nameB] = options.names ?? ["A", "B"];
  const top = options.top ?? 10;
  if (!Number.isInteger(top) || top < 1) throw new RangeError(`compareLogits: top must be a positive integer, got ${top}`);
  if (rowValues(a).length !== rowValues(b).length) throw new RangeError(`compareLogits: the rows differ in length (${rowValues(a).length}, ${rowValues(b).length})`);
  const p = softmax(a);
  const q = softmax(b);
  const best = (r: Float64Array) => [...r.keys()].sort((i, j) => r[j] - r[i] || i - j).slice(0, top);
  const ids = [...new Set([...best(p), ...best(q)])].sort((i, j) => Math.max(p[j], q[j]) - Math.max(p[i], q[i]) || i - j);
  const labels = ids.map((id) => plotlyText(options.tokenizer ? `${visibleToken(options.tokenizer.decode([id]))}` : String(id)));
  const x = ids.map((_, i) => i);
  const tv = totalVariation(p, q);
  return new Figure(
    [
      { type: "bar", name: nameA, x, y: compact(ids.map((i) => p[i])), customdata: ids, marker: { color: seriesColor(0) }, hovertemplate: `${plotlyText(nameA)}: %{y}<br>id %{customdata}<extra></extra>` },
      { type: "bar", name: nameB, x, y: compact(ids.map((i) => q[i])), customdata: ids, marker: { color: seriesColor(1) }, hovertemplate: `${plotlyText(nameB)}: %{y}<br>id %{customdata}<extra></extra>` },
    ],
    {
      title: { text: options.title ?? `Next-token probabilities: ${plotlyText(nameA)} vs ${plotlyText(nameB)} (total variation ${tv.toFixed(3)})` },
      barmode: "group",
      xaxis: { title: { text: "token" }, tickmode: "array", tickvals: x, ticktext: labels, tickangle: ids.length > 12 ? -60 : 0, automargin: true },
      yaxis: { title: { text: "probability" }, rangemode: "tozero" },
      height: 460,
    },
  );
}

/** Share of tokens whose top-k holds each expert, per layer: [layers][experts]. */
function selectionShares(routing: RouterTrace | ExpertLoad): { shares: number[][]; tokens: number } {
  if ("counts" in routing) {
    const { layers, experts, tokens } = routing;
    return { shares: Array.from({ length: layers }, (_, l) => Array.from({ length: experts }, (_, e) => (tokens ? routing.counts.get(l, e) / tokens : 0))), tokens };
  }
  const [L, T, K] = routing.ids.shape;
  const shares = Array.from({ length: L }, () => new Array<number>(routing.experts).fill(0));
  for (let l = 0; l < L; l++) for (let t = 0; t < T; t++) for (let s = 0; s < K; s++) shares[l][routing.ids.data[(l * T + t) * K + s]] += 1 / T;
  return { shares, tokens: T };
}

/**
 * Where two prompts' (or corpora's) routing differs: per layer and expert, the share of B's tokens that
 * chose the expert minus the share of A's. Red: B uses it more; blue: A does. Each side is a RouterTrace
 * or an ExpertLoad (any number of tokens).
 */
export function compareRouting(a: RouterTrace | ExpertLoad, b: RouterTrace | ExpertLoad, options: CompareOptions = {}): Figure {
  const [nameA, nameB] = options.names ?? ["A", "B"];
  const A = selectionShares(a);
  const B = selectionShares(b);
  if (A.shares.length !== B.shares.length || A.shares[0].length !== B.shares[0].length) {
    throw new RangeError(`compareRouting: the two sides come from models of other shapes (${A.shares.length}×${A.shares[0].length}, ${B.shares.length}×${B.shares[0].length})`);
  }
  const z = B.shares.map((row, l) => compact(row.map((v, e) => v - A.shares[l][e])));
  const hover = B.shares.map((row, l) => row.map((v, e) => `${plotlyText(nameA)}: ${A.shares[l][e].toFixed(3)}, ${plotlyText(nameB)}: ${v.toFixed(3)}`));
  const limit = Math.max(1e-9, ...z.flat().map(Math.abs));
  const layers = A.shares.length;
  const experts = A.shares[0].length;
  return new Figure(
    [
      {
        type: "heatmap",
        z,
        x: [...Array(experts).keys()],
        y: [...Array(layers).keys()],
        customdata: hover,
        colorscale: "RdBu",
        reversescale: true,
        zmin: -limit,
        zmax: limit,
        colorbar: { title: { text: `${plotlyText(nameB)} − ${plotlyText(nameA)}` } },
        hovertemplate: "layer %{y}, expert %{x}<br>share of tokens %{customdata}<br>difference %{z}<extra></extra>",
      },
    ],
    {
      title: { text: options.title ?? `Routing: share of tokens per expert, ${plotlyText(nameB)} (${B.tokens} tokens) minus ${plotlyText(nameA)} (${A.tokens} tokens)` },
      xaxis: { title: { text: "expert" }, dtick: experts <= 64 ? 1 : undefined },
      yaxis: { title: { text: "layer" }, autorange: "reversed", dtick: 1 },
      height: Math.min(900, 200 + 22 * layers),
    },
  );
}
