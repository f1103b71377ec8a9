// Routing consistency across layers: how much the top-1 expert in one layer tells about the top-1
// expert in another, for the same token. Expert ids of different layers are unrelated, so "the same
// id" means nothing; mutual information measures whether the choices are coupled at all.
import type { RouterTrace } from "../trace/router";
import { Figure } from "./figure";
import { compact } from "./labels";
import { topExpert } from "./top-expert";

function entropy(counts: Map<number, number>, n: number): number {
  let h = 0;
  for (const c of counts.values()) h -= (c / n) * Math.log(c / n);
  return h;
}

/**
 * [L][L] normalised mutual information I(A;B) / sqrt(H(A) H(B)) between the top-1 experts of two
 * layers over the traces' tokens: 1 when one layer's choice determines the other's, 0 when they are
 * independent. Estimated from counts, so it is biased upwards when tokens are few compared with
 * experts (hundreds of tokens or more give a usable picture).
 */
export function top1MutualInformation(traces: RouterTrace | RouterTrace[]): number[][] {
  const list = [traces].flat();
  if (list.length === 0) throw new Error("routingConsistency: no traces");
  const L = list[0].layers;
  // top1[l] = the top-1 expert of every token, over all traces
  const top1: number[][] = Array.from({ length: L }, () => []);
  for (const trace of list) {
    if (trace.layers !== L) throw new Error("routingConsistency: the traces come from models with different layer counts");
    for (let l = 0; l < L; l++) for (let t = 0; t < trace.tokens; t++) top1[l].push(topExpert(trace, l, t));
  }
  const n = top1[0].length;
  const marginal = top1.map((ids) => {
    const m = new Map<number, number>();
    for (const e of ids) m.set(e, (m.get(e) ?? 0) + 1);
    return m;
  });
  const h = marginal.map((m) => entropy(m, n));
  const nmi = Array.from({ length: L }, () => new Array<number>(L).fill(0));
  for (let a = 0; a < L; a++) {
    for (let b = a; b < L; b++) {
      const joint = new Map<number, number>();
      for (let t = 0; t < n; t++) {
        const key = top1[a][t] * 65536 + top1[b][t];
        joint.set(key, (joint.get(key) ?? 0) + 1);
      }
      const mutual = h[a] + h[b] - entropy(joint, n);
      const value = h[a] > 0 && h[b] > 0 ? Math.min(1, Math.max(0, mutual / Math.sqrt(h[a] * h[b]))) : a === b ? 1 : 0;
      nmi[a][b] = nmi[b][a] = value;
    }
  }
  return nmi;
}

export interface RoutingConsistencyOptions {
  title?: string;
}

/** Heatmap of top1MutualInformation: layer x layer. */
export function routingConsistency(traces: RouterTrace | RouterTrace[], options: RoutingConsistencyOptions = {}): Figure {
  const nmi = top1MutualInformation(traces);
  const layers = [...Array(nmi.length).keys()];
  const tokens = [traces].flat().reduce((n, t) => n + t.tokens, 0);
  return new Figure(
    [
      {
        type: "heatmap",
        z: nmi.map((row) => compact(row, 3)),
        x: layers,
        y: layers,
        zmin: 0,
        zmax: 1,
        colorscale: "Magma",
        colorbar: { title: { text: "NMI" } },
        hovertemplate: "layers %{y} and %{x}: %{z}<extra></extra>",
      },
    ],
    {
      title: { text: options.title ?? `Routing consistency across layers: mutual information of top-1 experts (normalised), ${tokens} tokens` },
      xaxis: { title: { text: "layer" }, dtick: 1, scaleanchor: "y", constrain: "domain" },
      yaxis: { title: { text: "layer" }, dtick: 1, autorange: "reversed" },
      height: Math.min(900, 260 + 18 * layers.length),
    },
  );
}
