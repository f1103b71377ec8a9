// Expert load as a layer x expert heatmap: where the router sends tokens, and how evenly.
import type { ExpertLoad } from "../trace/expert-load";
import { Figure } from "./figure";
import { compact } from "./labels";

export type LoadMetric = "fraction" | "count" | "probability";

export interface ExpertLoadHeatmapOptions {
  /**
   * "fraction" (default): share of tokens whose top-k holds the expert (uniform routing gives k/E);
   * "count": number of selections; "probability": mean router probability (uniform: 1/E).
   */
  metric?: LoadMetric;
  title?: string;
}

const METRIC_LABEL: Record<LoadMetric, string> = {
  fraction: "share of tokens",
  count: "selections",
  probability: "mean router probability",
};

/** One row per layer, one column per expert. */
export function expertLoadHeatmap(load: ExpertLoad, options: ExpertLoadHeatmapOptions = {}): Figure {
  const metric = options.metric ?? "fraction";
  if (!(metric in METRIC_LABEL)) throw new RangeError(`expertLoadHeatmap: unknown metric '${metric}' (fraction, count, probability)`);
  const { layers, experts, k, tokens } = load;
  const z: number[][] = [];
  for (let l = 0; l < layers; l++) {
    const counts = load.counts.index(l).data;
    const mass = load.mass.index(l).data;
    const row =
      metric === "count"
        ? Array.from(counts)
        : Array.from(metric === "fraction" ? counts : mass, (v) => (tokens ? v / tokens : 0));
    z.push(compact(row));
  }
  const uniform = metric === "fraction" ? `; uniform routing: ${(k / experts).toFixed(3)}` : metric === "probability" ? `; uniform: ${(1 / experts).toFixed(4)}` : "";
  const title = options.title ?? `Expert load over ${tokens} tokens (${METRIC_LABEL[metric]}${uniform})`;
  return new Figure(
    [
      {
        type: "heatmap",
        z,
        x: [...Array(experts).keys()],
        y: [...Array(layers).keys()],
        colorscale: "Viridis",
        zmin: 0,
        colorbar: { title: { text: METRIC_LABEL[metric] } },
        hovertemplate: `layer %{y}, expert %{x}<br>${METRIC_LABEL[metric]}: %{z}<extra></extra>`,
      },
    ],
    {
      title: { text: title },
      xaxis: { title: { text: "expert" }, dtick: experts <= 64 ? 1 : undefined },
      yaxis: { title: { text: "layer" }, autorange: "reversed", dtick: 1 },
      height: Math.min(1000, 260 + 36 * layers),
    },
  );
}
