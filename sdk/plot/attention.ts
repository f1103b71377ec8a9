// Attention map of one head: each query token's softmax weights over the keys it can see.
import type { AttentionTrace } from "../trace/attention";
import { Figure } from "./figure";
import { compact, tokenAxis, visibleToken, type TokenDecoder } from "./labels";

export interface AttentionMapOptions {
  /** Labels of every key position 0 .. start+T-1 (the queries are the trace's own tokens, the last T). */
  labels?: string[];
  /** Decodes the query tokens; earlier keys (from previous calls) are labelled by position. */
  tokenizer?: TokenDecoder;
  title?: string;
}

/** Query x key heatmap of `head` in the attention layer `layer` (model layer index); masked cells blank. */
export function attentionMap(trace: AttentionTrace, layer: number, head: number, options: AttentionMapOptions = {}): Figure {
  const li = trace.layers.indexOf(layer);
  if (li < 0) throw new RangeError(`attentionMap: layer ${layer} was not captured (captured: ${trace.layers.join(", ") || "none"})`);
  const hi = trace.heads.indexOf(head);
  if (hi < 0) throw new RangeError(`attentionMap: head ${head} was not captured (captured: ${trace.heads.join(", ")})`);
  const [, , T, S] = trace.weights.shape;
  const start = trace.span.start;
  let labels = options.labels;
  if (labels && labels.length !== S) throw new RangeError(`attentionMap: ${labels.length} labels given for ${S} key positions`);
  if (!labels) {
    const own = options.tokenizer ? Array.from(trace.span.ids, (id) => visibleToken(options.tokenizer!.decode([id]))) : undefined;
    labels = Array.from({ length: S }, (_, s) => (own && s >= start ? own[s - start] : String(s)));
  }
  const weights = trace.weights.index(li).index(hi);
  const z: (number | null)[][] = [];
  for (let t = 0; t < T; t++) {
    const row: (number | null)[] = compact(weights.index(t).data, 3);
    for (let s = start + t + 1; s < S; s++) row[s] = null; // causal: keys after the query
    z.push(row);
  }
  const keys = [...Array(S).keys()];
  const queries = keys.slice(start);
  return new Figure(
    [
      {
        type: "heatmap",
        z,
        x: keys,
        y: queries,
        zmin: 0,
        colorscale: "Viridis",
        colorbar: { title: { text: "weight" } },
        hovertemplate: "query %{y} → key %{x}: %{z}<extra></extra>",
      },
    ],
    {
      title: { text: options.title ?? `Attention weights, layer ${layer} head ${head}` },
      xaxis: tokenAxis(keys, labels, "key (attended to)"),
      yaxis: { ...tokenAxis(queries, queries.map((q) => labels![q]), "query"), autorange: "reversed", tickangle: 0 },
      height: Math.min(900, 220 + 20 * T),
    },
  );
}
