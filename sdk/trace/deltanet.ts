// Gated DeltaNet gates and memory per layer, head and token: the write strength beta, the decay exp(g)
// the state is multiplied by before each write, and the norm of the state after the token.
import type { Table } from "apache-arrow";
import { arrowTable } from "../arrow";
import type { TokenDecoder } from "../plot/labels";
import type { Tensor } from "../tensor";
import { concatTokens } from "./concat";
import { concatSpans, spanTexts, type TokenSpan } from "./span";

export class DeltaNetTrace {
  constructor(
    /** Model layer index of each traced DeltaNet layer (the first axis below). */
    readonly layers: number[],
    /** [deltanet layers, T, value heads] */
    readonly beta: Tensor<Float32Array>,
    /** [deltanet layers, T, value heads] exp(g), in (0, 1] */
    readonly decay: Tensor<Float32Array>,
    /** [deltanet layers, T, value heads] Frobenius norm of the recurrent state after each token */
    readonly stateNorm: Tensor<Float32Array>,
    readonly span: TokenSpan,
  ) {}

  /** One trace of consecutive calls (a prefill and its decode steps), tokens joined in order. */
  static concat(traces: DeltaNetTrace[]): DeltaNetTrace {
    const span = concatSpans(traces.map((t) => t.span), "DeltaNetTrace.concat");
    const join = (pick: (t: DeltaNetTrace) => Tensor<Float32Array>) => concatTokens(traces.map(pick), 1, "DeltaNetTrace.concat");
    return new DeltaNetTrace(traces[0].layers, join((t) => t.beta), join((t) => t.decay), join((t) => t.stateNorm), span);
  }

  /** Index along the first axis of the model layer `layer`. */
  indexOf(layer: number): number {
    const i = this.layers.indexOf(layer);
    if (i < 0) throw new RangeError(`layer ${layer} is not a DeltaNet layer (${this.layers.join(", ")})`);
    return i;
  }

  /** One row per (layer, position, head): token, token_text (when known), beta, decay, state_norm. */
  toArrow(options: { tokenizer?: TokenDecoder } = {}): Table {
    const texts = spanTexts(this.span, options.tokenizer);
    const [L, T, Hv] = this.beta.shape;
    const n = L * T * Hv;
    const token = new Int32Array(n);
    const tokenText: string[] = [];
    const layer = new Int32Array(n);
    const position = new Int32Array(n);
    const head = new Int32Array(n);
    let i = 0;
    for (let l = 0; l < L; l++)
      for (let t = 0; t < T; t++)
        for (let h = 0; h < Hv; h++, i++) {
          token[i] = this.span.ids[t];
          if (texts) tokenText.push(texts[t]);
          layer[i] = this.layers[l];
          position[i] = this.span.start + t;
          head[i] = h;
        }
    return arrowTable({ token, ...(texts ? { token_text: tokenText } : {}), layer, position, head, beta: this.beta.data, decay: this.decay.data, state_norm: this.stateNorm.data });
  }
}
