// The capture kinds of earlier releases ("router", "residual", ...) as hook point patterns.

/** A capture kind: a short name for a group of hook points, whose result keeps its own field (r.router, r.residual ...). */
export type CaptureKind = "router" | "residual" | "residual-mid" | "deltanet" | "attention-gate";

export const CAPTURE_KINDS: Record<CaptureKind, readonly string[]> = {
  router: [
    "blocks.*.moe.router_logits",
    "blocks.*.moe.router_probs",
    "blocks.*.moe.topk_ids",
    "blocks.*.moe.topk_weights",
    "blocks.*.moe.shared_gate",
  ],
  residual: ["blocks.*.resid_post"],
  "residual-mid": ["blocks.*.resid_mid"],
  deltanet: ["blocks.*.deltanet.beta", "blocks.*.deltanet.decay", "blocks.*.deltanet.state_norm"],
  "attention-gate": ["blocks.*.attn.gate"],
};

export function isCaptureKind(name: string): name is CaptureKind {
  return Object.prototype.hasOwnProperty.call(CAPTURE_KINDS, name);
}
