// Interventions: declarative edits the core applies inside the forward pass (on every backend), so the
// computation itself changes, not a copy of it. Positions are absolute sequence positions; when left
// out, an edit applies at every position of the call. Router, shared-expert and state edits are the
// core's own; steering and patching are presets over edits at hook points (lower.ts).
import type { Tensor } from "../tensor";

export type Intervention =
  /** The router gives these experts probability 0 at `layer`; the top-k renormalises over the rest. */
  | { type: "disable-experts"; layer: number; experts: number[]; positions?: number[] }
  /** These experts are always among the layer's top-k (weights from their unbiased probabilities). */
  | { type: "force-experts"; layer: number; experts: number[]; positions?: number[] }
  /** Adds `biases[i]` to the router logit of `experts[i]` at `layer` (before the softmax and top-k). */
  | { type: "bias-experts"; layer: number; experts: number[]; biases: number[]; positions?: number[] }
  /** Multiplies the gated shared expert's output by `scale` (0 disables it) at `layer`, or every layer. */
  | { type: "scale-shared-expert"; scale: number; layer?: number }
  /** Adds scale · vector to the residual stream after `layer`. */
  | { type: "steer"; layer: number; vector: Float32Array; scale?: number; positions?: number[] }
  /** Replaces the residual stream after `layer` at `positions` with `vector` (one hidden-size row each). */
  | { type: "patch-residual"; layer: number; positions: number[]; vector: Float32Array }
  /** Before the call, multiplies the DeltaNet recurrent state by `scale` (0 also clears the conv window). */
  | { type: "scale-deltanet-state"; scale: number; layer?: number };

export function disableExperts(layer: number, experts: number[], positions?: number[]): Intervention {
  return { type: "disable-experts", layer, experts, positions };
}

export function forceExperts(layer: number, experts: number[], positions?: number[]): Intervention {
  return { type: "force-experts", layer, experts, positions };
}

export function biasExperts(layer: number, experts: number[], biases: number[], positions?: number[]): Intervention {
  return { type: "bias-experts", layer, experts, biases, positions };
}

export function scaleSharedExpert(scale: number, layer?: number): Intervention {
  return { type: "scale-shared-expert", scale, layer };
}

export function steer(layer: number, vector: Float32Array, scale = 1, positions?: number[]): Intervention {
  return { type: "steer", layer, vector, scale, positions };
}

/**
 * Patches the residual after `layer` at `position` with the value another run captured there:
 * `source` is that run's `residual` capture ([layers, T, hidden]) and `sourceStart` the position of its
 * first token (the result's `span.start`).
 */
export function patchResidual(
  layer: number,
  position: number,
  source: Tensor<Float32Array>,
  sourceStart = 0,
): Intervention {
  const [, T, H] = source.shape;
  const t = position - sourceStart;
  if (t < 0 || t >= T) throw new RangeError(`patchResidual: position ${position} is not in the source run`);
  const row = source.index(layer).data.slice(t * H, (t + 1) * H);
  return { type: "patch-residual", layer, positions: [position], vector: row };
}

export function scaleDeltaNetState(scale: number, layer?: number): Intervention {
  return { type: "scale-deltanet-state", scale, layer };
}

export function resetDeltaNetState(layer?: number): Intervention {
  return { type: "scale-deltanet-state", scale: 0, layer };
}
