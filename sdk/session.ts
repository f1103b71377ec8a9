// A session over one sequence: prefill, decode token by token, capture what the model does, change
// it with interventions, fork to branch, reset.
import type { ModelConfig } from "./config";
import type { CaptureName, ForwardOptions, ForwardResult, ForwardSession } from "./forward";
import type { Intervention } from "./intervene/interventions";
import { lowerInterventions } from "./intervene/lower";
import { ActivationCache } from "./hooks/activation-cache";
import { CAPTURE_KINDS, isCaptureKind, type CaptureKind } from "./hooks/aliases";
import type { HookEdit } from "./hooks/edits";
import { hookDispatcher, type Hook } from "./hooks/hook-function";
import { hookPointsOf, patternMatches } from "./hooks/patterns";
import { topK, unembed, type LensTop } from "./lens";
import type { NativeForwardResult, NativeModel, NativeSession } from "./native";
import { Tensor } from "./tensor";
import {
  generate,
  type GenerateChunk,
  type GenerateInput,
  type GenerateOptions,
  type GenerationContext,
} from "./generate/generate";
import { AttentionGateTrace, AttentionTrace } from "./trace/attention";
import { DeltaNetTrace } from "./trace/deltanet";
import { ExpertLoad } from "./trace/expert-load";
import { RouterTrace } from "./trace/router";
import type { TokenSpan } from "./trace/span";

/** What a session needs from its model. */
export interface SessionContext {
  config: ModelConfig;
  native: NativeModel;
  /** Tokenizer and generation config, when the checkpoint has a tokenizer. */
  generation?: GenerationContext;
}

// The running moelens Jupyter kernel publishes itself here (kernel/bridge.ts).
function kernelBridge(): { onInterrupt(hook: () => void): () => void } | undefined {
  return (globalThis as Record<symbol, { onInterrupt(hook: () => void): () => void } | undefined>)[
    Symbol.for("moelens.kernel")
  ];
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

export class Session implements ForwardSession {
  private readonly persistent = new Set<Intervention>();
  private load?: ExpertLoad;

  /** @internal */
  constructor(
    private readonly native: NativeSession,
    private readonly context: SessionContext,
  ) {}

  get config(): ModelConfig {
    return this.context.config;
  }

  /** Number of tokens this session has consumed. */
  get position(): number {
    return this.native.position;
  }

  /** Bytes of native memory the session holds: DeltaNet state, KV cache, work buffers. */
  get memoryBytes(): number {
    return this.native.memoryBytes;
  }

  /** Feeds tokens (the whole prompt, or a continuation of earlier calls). */
  async prefill(ids: ArrayLike<number>, options: ForwardOptions = {}): Promise<ForwardResult> {
    return this.run(toIds(ids, this.config.vocabSize), options);
  }

  /** Feeds one token; returns the logits for the next one. */
  async decode(tokenId: number, options: ForwardOptions = {}): Promise<ForwardResult> {
    return this.run(toIds([tokenId], this.config.vocabSize), options);
  }

  /**
   * Greedy decoding of `steps` tokens in one native call: feeds `tokenId`, then each chosen token.
   * The arg-max runs on the backend and the chosen token stays there, so a GPU backend runs one step
   * while the host records the next (the fastest way to decode on a GPU). Returns the chosen ids; the
   * last one has not been fed yet, as after decode(). Interventions apply; captures need decode().
   */
  async decodeGreedy(
    tokenId: number,
    steps: number,
    options: Pick<ForwardOptions, "interventions" | "edits" | "signal"> = {},
  ): Promise<number[]> {
    toIds([tokenId], this.config.vocabSize);
    if (!Number.isInteger(steps) || steps < 1) throw new RangeError(`decodeGreedy: steps must be a positive integer, got ${steps}`);
    const signal = options.signal;
    signal?.throwIfAborted();
    const onAbort = () => this.native.cancel();
    signal?.addEventListener("abort", onAbort);
    const removeInterruptHook = kernelBridge()?.onInterrupt(onAbort);
    try {
      const lowered = lowerInterventions([...this.persistent, ...(options.interventions ?? [])], this.config.hiddenSize);
      const chosen = await this.native.decodeGreedy(tokenId, steps, {
        interventions: lowered.interventions,
        edits: [...lowered.edits, ...(options.edits ?? [])],
      });
      return Array.from(chosen);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      removeInterruptHook?.();
    }
  }

  /**
   * Streams text generated after `input` (a raw prompt, chat messages rendered with the chat
   * template, or token ids), continuing whatever the session already holds:
   * `for await (const chunk of s.generate("Once upon", { maxTokens: 20 })) process.stdout.write(chunk.text)`.
   */
  generate(input: GenerateInput, options: GenerateOptions = {}): AsyncGenerator<GenerateChunk, void, undefined> {
    const generation = this.context.generation;
    if (!generation) throw new Error("generate: the model has no tokenizer (tokenizer.json in its folder); use prefill/decode with ids");
    return generate(this, generation, input, options);
  }

  /** A deep copy of this session's state (KV cache, DeltaNet state, position). Interventions and load stats are not copied. */
  fork(): Session {
    return new Session(this.native.fork(), this.context);
  }

  /**
   * Frees the session's native state (KV cache, DeltaNet state, work buffers) now rather than at
   * garbage collection; the session cannot be used afterwards. Dropped sessions are freed by the
   * garbage collector too, which knows their native size.
   */
  dispose(): void {
    this.native.dispose();
  }

  /** Forgets everything: position 0, empty caches, no expert load. Persistent interventions stay. */
  reset(): void {
    this.native.reset();
    this.load = undefined;
  }

  /** Adds an intervention to every later call of this session, until `remove()`. */
  addIntervention(intervention: Intervention): { remove(): void } {
    this.persistent.add(intervention);
    return { remove: () => void this.persistent.delete(intervention) };
  }

  /** The persistent interventions, in the order they were added. */
  get interventions(): readonly Intervention[] {
    return [...this.persistent];
  }

  /** Expert load over every call of this session that captured "router" (undefined before the first). */
  get expertLoad(): ExpertLoad | undefined {
    return this.load;
  }

  /** A snapshot of a DeltaNet layer's memory: recurrent state [valueHeads, keyDim, valueDim] and conv window [kernel-1, convDim]. */
  deltanetState(layer: number): { recurrent: Tensor<Float32Array>; conv: Tensor<Float32Array> } {
    const c = this.config;
    const s = this.native.deltanetState(layer);
    const convDim = 2 * c.linearKeyHeads * c.linearKeyDim + c.linearValueHeads * c.linearValueDim;
    return {
      recurrent: new Tensor([c.linearValueHeads, c.linearKeyDim, c.linearValueDim], s.recurrent),
      conv: new Tensor([c.convKernel - 1, convDim], s.conv),
    };
  }

  /**
   * The logit lens over a result's residual capture: the top tokens that the final norm and lm_head
   * give after each layer, for each position (or the given layers and call-relative token indices).
   */
  async logitLens(
    result: ForwardResult,
    options: { top?: number; layers?: number[]; tokens?: number[] } = {},
  ): Promise<LensTop[]> {
    const residual = result.residual;
    if (!residual) throw new Error('logitLens: the result has no residual capture (capture: ["residual"])');
    const [L, T, H] = residual.shape;
    const layers = options.layers ?? [...Array(L).keys()];
    const tokens = options.tokens ?? [...Array(T).keys()];
    const rows = new Float32Array(layers.length * tokens.length * H);
    let r = 0;
    for (const l of layers) for (const t of tokens) rows.set(residual.index(l).index(t).data, r++ * H);
    const logits = await unembed(this.context.native, rows, this.config.vocabSize);
    const out: LensTop[] = [];
    r = 0;
    for (const l of layers)
      for (const t of tokens) {
        const best = topK(logits.index(r++).data, options.top ?? 5);
        out.push({ layer: l, position: result.span.start + t, ...best });
      }
    return out;
  }

  /** The hook point patterns a capture list stands for (capture kinds expanded; unknown names refused). */
  private capturePatterns(capture: readonly CaptureName[], attention: ForwardOptions["attention"]): string[] {
    const points = hookPointsOf(this.context.native);
    const out: string[] = [];
    for (const name of capture) {
      if (isCaptureKind(name)) out.push(...CAPTURE_KINDS[name]);
      else if (typeof name === "string" && points.some((p) => patternMatches(name, p))) out.push(name);
      else {
        throw new TypeError(
          `unknown capture '${name}': not a capture kind (${Object.keys(CAPTURE_KINDS).join(", ")}) nor a hook point name or pattern of this model (model.hookPoints())`,
        );
      }
    }
    for (const l of attention?.layers ?? []) {
      if (!points.some((p) => p.name === `blocks.${l}.attn.probs`)) throw new RangeError(`capture: layer ${l} is not an attention layer`);
      out.push(`blocks.${l}.attn.probs`);
    }
    return [...new Set(out)];
  }

  private async run(ids: Int32Array, options: ForwardOptions): Promise<ForwardResult> {
    const capture = this.capturePatterns(options.capture ?? [], options.attention);
    // The trace fields label rows by the call's tokens: they need every position of the call.
    const kinds = (options.capture ?? []).filter(isCaptureKind);
    if (options.capturePositions && (kinds.length || options.attention?.layers.length)) {
      throw new TypeError(
        `capturePositions keeps rows of hook points in r.cache; the capture kinds (${kinds.join(", ") || "attention"}) record every position: name their hook points instead`,
      );
    }
    const lowered = lowerInterventions([...this.persistent, ...(options.interventions ?? [])], this.config.hiddenSize);
    const hooks = options.hooks ?? [];
    hooks.forEach(([name, fn], i) => {
      if (typeof name !== "string" || typeof fn !== "function") throw new TypeError(`hooks[${i}] must be [hook point name, function]`);
    });
    const signal = options.signal;
    signal?.throwIfAborted();
    const onAbort = () => this.native.cancel();
    signal?.addEventListener("abort", onAbort);
    // Inside the moelens Jupyter kernel, interrupting the cell cancels the native work too.
    const removeInterruptHook = kernelBridge()?.onInterrupt(onAbort);
    const start = this.native.position;
    try {
      const r = await this.native.forward(ids, {
        logits: options.logits ?? "last",
        capture,
        capturePositions: options.capturePositions,
        attentionHeads: options.attention?.heads,
        interventions: lowered.interventions,
        edits: [...lowered.edits, ...(options.edits ?? [])],
        hooks: hooks.map(([name]) => name),
        hookFunction: hooks.length ? hookDispatcher(hooks) : undefined,
      });
      const tokenizer = this.context.generation?.tokenizer;
      const result = this.wrap(r, { ids, start, ...(tokenizer ? { tokenizer } : {}) }, new Set(options.capture ?? []), options.attention);
      if (result.router) (this.load ??= new ExpertLoad(result.router.layers, result.router.experts, result.router.k)).add(result.router);
      return result;
    } finally {
      signal?.removeEventListener("abort", onAbort);
      removeInterruptHook?.();
    }
  }

  private wrap(
    r: NativeForwardResult,
    span: TokenSpan,
    kinds: Set<CaptureName>,
    attention?: ForwardOptions["attention"],
  ): ForwardResult {
    const c = this.config;
    const T = r.n;
    const cache = new ActivationCache(r.captures.map((x) => [x.name, new Tensor(x.shape, x.data)]));
    const out: ForwardResult = { tokens: T, span, logits: new Tensor([r.logitsRows, c.vocabSize], r.logits), cache };
    const layersOf = (kind: string) => c.layerTypes.flatMap((t, i) => (t === kind ? [i] : []));
    const every = [...Array(c.numLayers).keys()];
    const f32 = (template: string, layers: number[]) => cache.stack<Float32Array>(template, layers);
    if (kinds.has("router")) {
      out.router = new RouterTrace(
        cache.stack<Int32Array>("blocks.{l}.moe.topk_ids", every),
        f32("blocks.{l}.moe.topk_weights", every),
        f32("blocks.{l}.moe.router_logits", every),
        f32("blocks.{l}.moe.router_probs", every),
        sigmoid(f32("blocks.{l}.moe.shared_gate", every)),
        span,
      );
    }
    if (kinds.has("residual")) out.residual = f32("blocks.{l}.resid_post", every);
    if (kinds.has("residual-mid")) out.residualMid = f32("blocks.{l}.resid_mid", every);
    if (kinds.has("deltanet")) {
      const layers = layersOf("linear_attention");
      out.deltanet = new DeltaNetTrace(
        layers,
        f32("blocks.{l}.deltanet.beta", layers),
        f32("blocks.{l}.deltanet.decay", layers),
        f32("blocks.{l}.deltanet.state_norm", layers),
        span,
      );
    }
    if (attention?.layers.length) {
      const layers = [...attention.layers];
      const heads = attention.heads?.length ? [...attention.heads] : [...Array(c.numHeads).keys()];
      out.attention = new AttentionTrace(layers, heads, f32("blocks.{l}.attn.probs", layers), span);
    }
    if (kinds.has("attention-gate")) {
      const layers = layersOf("full_attention");
      const gate = sigmoid(f32("blocks.{l}.attn.gate", layers));
      out.attentionGate = new AttentionGateTrace(layers, new Tensor([layers.length, T, c.numHeads * c.headDim], gate.data), span);
    }
    return out;
  }
}

// The legacy result fields hold gates as probabilities; the hook points hold their logits.
function sigmoid(t: Tensor<Float32Array>): Tensor<Float32Array> {
  return new Tensor(t.shape, t.data.map((x) => 1 / (1 + Math.exp(-x))));
}
