// A session over one sequence: prefill, decode token by token, fork to branch, reset.
import type { NativeForwardResult, NativeSession } from "./native";
import { Tensor } from "./tensor";
import type { ModelConfig } from "./config";

/** What a forward call can record, besides logits. */
export type CaptureName = "router" | "residual";
const CAPTURE_NAMES: readonly CaptureName[] = ["router", "residual"];

export interface ForwardOptions {
  /** "last" (default): logits of the last position; "all": every position; "none": skip the lm_head. */
  logits?: "all" | "last" | "none";
  /** Traces to record during this call. */
  capture?: CaptureName[];
}

export interface RouterTrace {
  /** [layers, T, k] chosen experts, by descending weight */
  ids: Tensor<Int32Array>;
  /** [layers, T, k] renormalised routing weights */
  weights: Tensor<Float32Array>;
  /** [layers, T, experts] router logits */
  logits: Tensor<Float32Array>;
}

export interface ForwardResult {
  /** Tokens fed by this call. */
  tokens: number;
  /** [T, vocab] with logits: "all", [1, vocab] with "last", [0, vocab] with "none". */
  logits: Tensor<Float32Array>;
  router?: RouterTrace;
  /** [layers, T, hidden] residual stream after each layer */
  residual?: Tensor<Float32Array>;
}

function toIds(ids: ArrayLike<number>, vocab: number): Int32Array {
  if (ids.length === 0) throw new RangeError("prefill: no token ids given");
  const out = new Int32Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const v = ids[i];
    if (!Number.isInteger(v) || v < 0 || v >= vocab) {
      throw new RangeError(`token id ${v} at index ${i} is not an integer in [0, ${vocab})`);
    }
    out[i] = v;
  }
  return out;
}

export class Session {
  /** @internal */
  constructor(
    private readonly native: NativeSession,
    readonly config: ModelConfig,
  ) {}

  /** Number of tokens this session has consumed. */
  get position(): number {
    return this.native.position;
  }

  /** Feeds tokens (the whole prompt, or a continuation of earlier calls). */
  async prefill(ids: ArrayLike<number>, options: ForwardOptions = {}): Promise<ForwardResult> {
    return this.run(toIds(ids, this.config.vocabSize), options);
  }

  /** Feeds one token; returns the logits for the next one. */
  async decode(tokenId: number, options: ForwardOptions = {}): Promise<ForwardResult> {
    return this.run(toIds([tokenId], this.config.vocabSize), options);
  }

  /** A deep copy of this session's state (KV cache, DeltaNet state, position). */
  fork(): Session {
    return new Session(this.native.fork(), this.config);
  }

  /** Forgets everything: position 0, empty caches. */
  reset(): void {
    this.native.reset();
  }

  private async run(ids: Int32Array, options: ForwardOptions): Promise<ForwardResult> {
    const capture = new Set(options.capture ?? []);
    for (const name of capture) {
      if (!CAPTURE_NAMES.includes(name)) {
        throw new TypeError(`unknown capture '${name}' (known: ${CAPTURE_NAMES.join(", ")})`);
      }
    }
    const r = await this.native.forward(ids, {
      logits: options.logits ?? "last",
      router: capture.has("router"),
      residual: capture.has("residual"),
    });
    return this.wrap(r);
  }

  private wrap(r: NativeForwardResult): ForwardResult {
    const c = this.config;
    const out: ForwardResult = {
      tokens: r.n,
      logits: new Tensor([r.logitsRows, c.vocabSize], r.logits),
    };
    if (r.routerIds && r.routerWeights && r.routerLogits) {
      out.router = {
        ids: new Tensor([c.numLayers, r.n, c.expertsPerToken], r.routerIds),
        weights: new Tensor([c.numLayers, r.n, c.expertsPerToken], r.routerWeights),
        logits: new Tensor([c.numLayers, r.n, c.numExperts], r.routerLogits),
      };
    }
    if (r.residual) out.residual = new Tensor([c.numLayers, r.n, c.hiddenSize], r.residual);
    return out;
  }
}
