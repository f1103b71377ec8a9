// A forward call's options and result: what prefill and decode take and return, shared by the session
// and whatever drives it (generation, the server).
import type { ModelConfig } from "./config";
import type { Intervention } from "./intervene/interventions";
import type { Tensor } from "./tensor";
import type { AttentionGateTrace, AttentionTrace } from "./trace/attention";
import type { DeltaNetTrace } from "./trace/deltanet";
import type { RouterTrace } from "./trace/router";
import type { TokenSpan } from "./trace/span";

/** What a forward call can record besides logits. Capture is opt-in: what is not asked for costs nothing. */
export type CaptureName = "router" | "residual" | "residual-mid" | "deltanet" | "attention-gate";
export const captureNames: readonly CaptureName[] = ["router", "residual", "residual-mid", "deltanet", "attention-gate"];

export interface ForwardOptions {
  /** "last" (default): logits of the last position; "all": every position; "none": skip the lm_head. */
  logits?: "all" | "last" | "none";
  /** Traces to record during this call. */
  capture?: CaptureName[];
  /** Attention weights of these attention layers (and heads; default all), refused past 512 MiB. */
  attention?: { layers: number[]; heads?: number[] };
  /** Edits applied during this call only (on top of the session's persistent ones). */
  interventions?: Intervention[];
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
  prefill(ids: ArrayLike<number>, options?: ForwardOptions): Promise<ForwardResult>;
  decode(tokenId: number, options?: ForwardOptions): Promise<ForwardResult>;
}
