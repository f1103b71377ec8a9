// A forward call's options and result: what prefill and decode take and return, shared by the session
// and whatever drives it (generation, the server).
import type { ModelConfig } from "./config";
import type { ActivationCache } from "./hooks/activation-cache";
import type { CaptureKind } from "./hooks/aliases";
import type { HookEdit } from "./hooks/edits";
import type { Hook } from "./hooks/hook-function";
import type { Intervention } from "./intervene/interventions";
import type { Tensor } from "./tensor";
import type { AttentionGateTrace, AttentionTrace } from "./trace/attention";
import type { DeltaNetTrace } from "./trace/deltanet";
import type { RouterTrace } from "./trace/router";
import type { TokenSpan } from "./trace/span";

/**
 * What a forward call can record besides logits: a hook point name ("blocks.3.resid_post"), a pattern
 * ("blocks.*.moe.router_probs"; `*` stands for any run of characters without a dot), or a capture kind
 * ("router", "residual" ...: groups of hook points with their own result fields). Capture is opt-in:
 * what is not asked for costs nothing.
 */
export type CaptureName = CaptureKind | (string & {});

export interface ForwardOptions {
  /** "last" (default): logits of the last position; "all": every position; "none": skip the lm_head. */
  logits?: "all" | "last" | "none";
  /** Values to record during this call, into `result.cache` (and the fields of capture kinds). */
  capture?: CaptureName[];
  /** Keep captured rows of these absolute positions only (default: every position of the call). */
  capturePositions?: number[];
  /** Attention weights of these attention layers (and heads; default all), refused past 512 MiB. */
  attention?: { layers: number[]; heads?: number[] };
  /** Edits applied during this call only (on top of the session's persistent ones). */
  interventions?: Intervention[];
  /** Edits at hook points during this call (set, add, scale, zero, mean ablation; sdk/hooks/edits). */
  edits?: HookEdit[];
  /**
   * Hook functions: `[["blocks.2.deltanet.out", (value, ctx) => replacement]]`, called mid-forward
   * with each matching point's value. An exception rejects the call and leaves the session as before.
   */
  hooks?: Hook[];
  /** Cancels the call between chunks of tokens; the session then holds the tokens fed so far. */
  signal?: AbortSignal;
}

export interface ForwardResult {
  /** Tokens fed by this call. */
  tokens: number;
  /** Their ids and the position of the first. */
  span: TokenSpan;
  /** [T, vocab] with logits: "all", [1, vocab] with "last", [0, vocab] with "none". */
  logits: Tensor<Float32Array>;
  /** Every captured hook point by name: `r.cache.get("blocks.3.resid_post")`. */
  cache: ActivationCache;
  router?: RouterTrace;
  /** [layers, T, hidden] residual stream after each layer */
  residual?: Tensor<Float32Array>;
  /** [layers, T, hidden] residual stream after each layer's attention or DeltaNet sublayer */
  residualMid?: Tensor<Float32Array>;
  deltanet?: DeltaNetTrace;
  attention?: AttentionTrace;
  attentionGate?: AttentionGateTrace;
}

/** The forward calls of a session: what generation drives. */
export interface ForwardSession {
  readonly config: ModelConfig;
  /** Tokens the session holds (the position of the next token). */
  readonly position: number;
  prefill(ids: ArrayLike<number>, options?: ForwardOptions): Promise<ForwardResult>;
  decode(tokenId: number, options?: ForwardOptions): Promise<ForwardResult>;
}
