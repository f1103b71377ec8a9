// The router's record of a call: per layer and token, the chosen experts and their weights, the full
// router logits and probabilities, and the shared expert's gate.
import type { Table } from "apache-arrow";
import { arrowTable } from "../arrow";
import { viewMimeBundle } from "../display/views";
import type { TokenDecoder } from "../plot/labels";
import { Tensor } from "../tensor";
import { concatTokens } from "./concat";
import { concatSpans, spanTexts, type TokenSpan } from "./span";

export class RouterTrace {
  constructor(
    /** [layers, T, k] chosen experts: experts forced by an intervention first, then by descending weight */
    readonly ids: Tensor<Int32Array>,
    /** [layers, T, k] routing weights (renormalised over the chosen experts) */
    readonly weights: Tensor<Float32Array>,
    /** [layers, T, experts] router logits */
    readonly logits: Tensor<Float32Array>,
    /** [layers, T, experts] router probabilities (softmax over all experts, after interventions) */
    readonly probs: Tensor<Float32Array>,
    /** [layers, T] sigmoid gate of the shared expert */
    readonly sharedGate: Tensor<Float32Array>,
    readonly span: TokenSpan,
  ) {}

  /**
   * One trace of consecutive calls (a prefill and the decode steps after it): tokens joined in order;
   * each trace must start where the one before it ended.
   */
  static concat(traces: RouterTrace[]): RouterTrace {
    const span = concatSpans(traces.map((t) => t.span), "RouterTrace.concat");
    const join = <D extends Int32Array | Float32Array>(pick: (t: RouterTrace) => Tensor<D>) => concatTokens(traces.map(pick), 1, "RouterTrace.concat");
    return new RouterTrace(join((t) => t.ids), join((t) => t.weights), join((t) => t.logits), join((t) => t.probs), join((t) => t.sharedGate), span);
  }

  get layers(): number {
    return this.ids.shape[0];
  }
  get tokens(): number {
    return this.ids.shape[1];
  }
  get k(): number {
    return this.ids.shape[2];
  }
  get experts(): number {
    return this.logits.shape[2];
  }

  /** Chosen experts of one layer and token (position relative to this call). */
  chosen(layer: number, t: number): { expert: number; weight: number }[] {
    const out = [];
    for (let s = 0; s < this.k; s++) out.push({ expert: this.ids.get(layer, t, s), weight: this.weights.get(layer, t, s) });
    return out;
  }

  /** Notebook display: the top-1 expert per layer and token on its color (top-k on hover). */
  toMimeBundle(): Record<string, unknown> {
    return viewMimeBundle(this);
  }

  /**
   * Long form: one row per (layer, position, slot) with token, token_text (when the tokenizer is
   * known), position, layer, slot, expert, weight.
   */
  toArrow(options: { tokenizer?: TokenDecoder } = {}): Table {
    const texts = spanTexts(this.span, options.tokenizer);
    const [L, T, K] = this.ids.shape;
    const n = L * T * K;
    const token = new Int32Array(n);
    const position = new Int32Array(n);
    const layer = new Int32Array(n);
    const slot = new Int32Array(n);
    const expert = new Int32Array(n);
    const weight = new Float32Array(n);
    const tokenText: string[] = [];
    let i = 0;
    for (let l = 0; l < L; l++) {
      for (let t = 0; t < T; t++) {
        for (let s = 0; s < K; s++, i++) {
          token[i] = this.span.ids[t];
          if (texts) tokenText.push(texts[t]);
          position[i] = this.span.start + t;
          layer[i] = l;
          slot[i] = s;
          expert[i] = this.ids.data[i];
          weight[i] = this.weights.data[i];
        }
      }
    }
    return arrowTable({ token, ...(texts ? { token_text: tokenText } : {}), position, layer, slot, expert, weight });
  }

  /** Long form of the full distribution: one row per (layer, position, expert) with token, token_text, logit and probability. */
  probsToArrow(options: { tokenizer?: TokenDecoder } = {}): Table {
    const texts = spanTexts(this.span, options.tokenizer);
    const [L, T, E] = this.probs.shape;
    const n = L * T * E;
    const token = new Int32Array(n);
    const tokenText: string[] = [];
    const position = new Int32Array(n);
    const layer = new Int32Array(n);
    const expert = new Int32Array(n);
    let i = 0;
    for (let l = 0; l < L; l++)
      for (let t = 0; t < T; t++)
        for (let e = 0; e < E; e++, i++) {
          token[i] = this.span.ids[t];
          if (texts) tokenText.push(texts[t]);
          position[i] = this.span.start + t;
          layer[i] = l;
          expert[i] = e;
        }
    return arrowTable({ token, ...(texts ? { token_text: tokenText } : {}), position, layer, expert, logit: this.logits.data, prob: this.probs.data });
  }
}
