// Edits at hook points: declarative changes to a named value of the forward pass, applied by the core
// where the model plan taps that value (on every backend), before anything downstream reads it.

/** Which part of a hook point's value an edit touches; everything left out means all of it. */
export interface EditSelection {
  /** Absolute positions (default: every position of the call). */
  positions?: number[];
  /** For values shaped [heads, head_dim] (attn.q, deltanet.head_out ...): these heads. */
  heads?: number[];
  /** Indices into the flattened per-token value (experts for router_logits). */
  channels?: number[];
}

export type HookEdit = EditSelection & {
  /** A hook point name or pattern: "blocks.3.resid_post", "blocks.*.attn.gate". */
  hook: string;
} & (
    | /** The selected values become `values`: one per selected channel, or that many per listed position. */
    { op: "set"; values: Float32Array }
    /** `values` is added to the selected values (one per selected channel, or that many per listed position). */
    | { op: "add"; values: Float32Array }
    /** The selected values are multiplied by `scale`. */
    | { op: "scale"; scale: number }
    /** The selected values become 0. */
    | { op: "zero" }
    /** Mean ablation: the selected values become their mean over the call's positions (per chunk of 512). */
    | { op: "mean" }
  );

export function setAt(hook: string, values: Float32Array, selection: EditSelection = {}): HookEdit {
  return { hook, op: "set", values, ...selection };
}

export function addAt(hook: string, values: Float32Array, selection: EditSelection = {}): HookEdit {
  return { hook, op: "add", values, ...selection };
}

export function scaleAt(hook: string, scale: number, selection: EditSelection = {}): HookEdit {
  return { hook, op: "scale", scale, ...selection };
}

export function zeroAt(hook: string, selection: EditSelection = {}): HookEdit {
  return { hook, op: "zero", ...selection };
}

export function meanAblate(hook: string, selection: EditSelection = {}): HookEdit {
  return { hook, op: "mean", ...selection };
}
