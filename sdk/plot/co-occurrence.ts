// Expert co-occurrence: how often two experts are chosen for the same token in one layer. Experts
// that always fire together act as one wider expert; a clustered matrix shows such pairs.
import type { RouterTrace } from "../trace/router";
import { Figure } from "./figure";

/** [E][E] counts of tokens whose top-k holds both experts (the diagonal: tokens that chose the expert). */
export function coOccurrenceCounts(traces: RouterTrace | RouterTrace[], layer: number): number[][] {
  const list = [traces].flat();
  if (list.length === 0) throw new Error("expertCoOccurrence: no traces");
  const E = list[0].experts;
  const counts = Array.from({ length: E }, () => new Array<number>(E).fill(0));
  for (const trace of list) {
    if (trace.experts !== E) throw new Error("expertCoOccurrence: the traces come from models with different expert counts");
    if (!Number.isInteger(layer) || layer < 0 || layer >= trace.layers) throw new RangeError(`expertCoOccurrence: layer ${layer} is outside [0, ${trace.layers})`);
    const { tokens: T, k } = trace;
    const ids = trace.ids.index(layer).data;
    for (let t = 0; t < T; t++) {
      for (let a = 0; a < k; a++) {
        const i = ids[t * k + a];
        for (let b = 0; b < k; b++) counts[i][ids[t * k + b]] += 1;
      }
    }
  }
  return counts;
}

export interface CoOccurrenceOptions {
  title?: string;
}

/** Heatmap of co-occurrence counts at `layer`; the diagonal (each expert with itself) is left blank. */
export function expertCoOccurrence(traces: RouterTrace | RouterTrace[], layer: number, options: CoOccurrenceOptions = {}): Figure {
  const counts = coOccurrenceCounts(traces, layer);
  const E = counts.length;
  const z = counts.map((row, i) => row.map((v, j) => (i === j ? null : v)));
  const ids = [...Array(E).keys()];
  return new Figure(
    [
      {
        type: "heatmap",
        z,
        x: ids,
        y: ids,
        colorscale: "Blues",
        reversescale: true,
        colorbar: { title: { text: "tokens" } },
        hovertemplate: "experts %{y} and %{x}: %{z} tokens<extra></extra>",
      },
    ],
    {
      title: { text: options.title ?? `Expert co-occurrence in layer ${layer} (tokens that chose both)` },
      xaxis: { title: { text: "expert" }, dtick: E <= 64 ? 1 : undefined, scaleanchor: "y", constrain: "domain" },
      yaxis: { title: { text: "expert" }, dtick: E <= 64 ? 1 : undefined, autorange: "reversed" },
      height: 640,
    },
  );
}
