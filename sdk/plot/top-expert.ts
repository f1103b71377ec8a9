// The expert with the largest routing weight for one token in one layer. Slot 0 is usually that
// expert, but forced experts (forceExperts) take the first slots whatever their weight.
import type { RouterTrace } from "../trace/router";

export function topExpert(trace: RouterTrace, layer: number, t: number): number {
  const k = trace.k;
  const offset = (layer * trace.tokens + t) * k;
  let best = 0;
  for (let s = 1; s < k; s++) if (trace.weights.data[offset + s] > trace.weights.data[offset + best]) best = s;
  return trace.ids.data[offset + best];
}
