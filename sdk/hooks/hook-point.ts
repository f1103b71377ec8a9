// The model's hook points as `model.hookPoints()` lists them (native/core/hook_points.h is the registry).

/** One hook point of a loaded model: a named intermediate value of the forward pass. */
export interface HookPoint {
  /** The name to capture, edit or hook it by: "embed", "blocks.3.resid_post", "logits". */
  name: string;
  /** The name with "{l}" for the layer: "blocks.{l}.resid_post". */
  template: string;
  /** Its layer (absent for model-wide points). */
  layer?: number;
  /** Axis names, e.g. ["n", "heads", "head_dim"]; "n" is the tokens of the call, "context" every position so far. */
  dims: string[];
  /** Axis sizes, with "n" and "context" where they depend on the call. */
  shape: (number | "n" | "context")[];
  dtype: "float32" | "int32";
  /** Whether edits and hook functions may change it (the others are side outputs of a kernel: capture only). */
  editable: boolean;
  /** Selected only by its exact name, never by a wildcard (blocks.{l}.attn.probs: large). */
  optIn: boolean;
  /** One line of what the value is. */
  meaning: string;
}
