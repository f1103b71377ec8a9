// The routing extension: with {"moelens": {"routing": true}} a response carries the expert load of
// every token the request routed (its prompt, cached part included, and the generated tokens fed
// back), per layer, from the router capture (ExpertLoad).
import { ExpertLoad } from "../trace/expert-load";

export interface LayerRouting {
  layer: number;
  /** Selections of each expert (index = expert id); they sum to tokens x experts_per_token. */
  counts: number[];
  /** Entropy (nats) of the selection distribution; ln(experts) is perfectly balanced. */
  entropy: number;
  /** std / mean of the counts; 0 is perfectly balanced. */
  coefficient_of_variation: number;
  /** The most selected experts, most first (ties: lower id first). */
  top: { expert: number; count: number }[];
}

export interface RoutingSummary {
  /** Tokens routed (prompt tokens and generated tokens fed to the model). */
  tokens: number;
  experts: number;
  experts_per_token: number;
  /** The load-balancing loss as training computes it, over all layers (experts_per_token when perfectly balanced). */
  aux_loss: number;
  layers: LayerRouting[];
}

/** A new ExpertLoad holding both (either may be undefined). */
export function mergeLoads(a: ExpertLoad | undefined, b: ExpertLoad | undefined): ExpertLoad | undefined {
  const first = a ?? b;
  if (!first) return undefined;
  const sum = new ExpertLoad(first.layers, first.experts, first.k);
  for (const load of [a, b]) {
    if (!load) continue;
    for (let i = 0; i < sum.counts.data.length; i++) {
      sum.counts.data[i] += load.counts.data[i];
      sum.mass.data[i] += load.mass.data[i];
    }
    sum.tokens += load.tokens;
  }
  return sum;
}

export function routingSummary(load: ExpertLoad, top = 8): RoutingSummary {
  const layers: LayerRouting[] = [];
  for (let l = 0; l < load.layers; l++) {
    const counts = Array.from(load.counts.index(l).data);
    const ranked = counts
      .map((count, expert) => ({ expert, count }))
      .sort((x, y) => y.count - x.count || x.expert - y.expert)
      .slice(0, top);
    layers.push({
      layer: l,
      counts,
      entropy: load.entropy(l),
      coefficient_of_variation: load.coefficientOfVariation(l),
      top: ranked,
    });
  }
  return { tokens: load.tokens, experts: load.experts, experts_per_token: load.k, aux_loss: load.auxLoss(), layers };
}
