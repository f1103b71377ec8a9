// Per-token routing: a layer x token grid where each cell is colored by the token's top-1 expert in
// that layer (the Mixtral paper's token coloring, for every layer at once).
import type { RouterTrace } from "../trace/router";
import { categoricalColorscale } from "./colors";
import { Figure } from "./figure";
import { resolveLabels, tokenAxis, type TokenDecoder } from "./labels";
import { topExpert } from "./top-expert";

export interface TokenRoutingOptions {
  /** Token labels (one per token of the trace); default: decoded with `tokenizer`, else positions. */
  labels?: string[];
  tokenizer?: TokenDecoder;
  /** Model layers to show (default all). */
  layers?: number[];
  title?: string;
}

export function tokenRouting(trace: RouterTrace, options: TokenRoutingOptions = {}): Figure {
  const { tokens: T, k, experts: E } = trace;
  const layers = options.layers ?? [...Array(trace.layers).keys()];
  for (const l of layers) if (!Number.isInteger(l) || l < 0 || l >= trace.layers) throw new RangeError(`tokenRouting: layer ${l} is outside [0, ${trace.layers})`);
  const labels = resolveLabels("tokenRouting", trace.span.ids, trace.span.start, options);
  const positions = Array.from(trace.span.ids, (_, t) => trace.span.start + t);
  const z: number[][] = [];
  const hover: string[][] = [];
  for (const l of layers) {
    const top: number[] = [];
    const text: string[] = [];
    for (let t = 0; t < T; t++) {
      const chosen = trace.chosen(l, t).sort((a, b) => b.weight - a.weight);
      top.push(topExpert(trace, l, t));
      text.push(chosen.map((c) => `${c.expert}: ${c.weight.toFixed(3)}`).join("<br>"));
    }
    z.push(top);
    hover.push(text);
  }
  return new Figure(
    [
      {
        type: "heatmap",
        z,
        x: positions,
        y: layers,
        text: z.map((row) => row.map(String)),
        texttemplate: T <= 64 ? "%{text}" : "",
        customdata: hover,
        colorscale: categoricalColorscale(E),
        zmin: -0.5,
        zmax: E - 0.5,
        showscale: false,
        xgap: 1,
        ygap: 1,
        hovertemplate: `layer %{y}, position %{x}<br>top-${k} experts (weight):<br>%{customdata}<extra></extra>`,
      },
    ],
    {
      title: { text: options.title ?? "Top-1 expert of each token in each layer (color and number: expert id)" },
      xaxis: tokenAxis(positions, labels, "token"),
      yaxis: { title: { text: "layer" }, autorange: "reversed", tickmode: "array", tickvals: layers },
      height: Math.min(1100, 260 + 36 * layers.length),
    },
  );
}
