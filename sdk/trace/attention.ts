// Attention layers: softmax weights of chosen layers and heads, and the output gate values.
import type { Table } from "apache-arrow";
import { arrowTable } from "../arrow";
import type { TokenDecoder } from "../plot/labels";
import { Tensor } from "../tensor";
import { concatTokens } from "./concat";
import { concatSpans, spanTexts, type TokenSpan } from "./span";

export class AttentionTrace {
  constructor(
    /** Model layer index of each traced attention layer (axis 0 of `weights`). */
    readonly layers: number[],
    /** Head index of each traced head (axis 1 of `weights`). */
    readonly heads: number[],
    /** [layers, heads, T, keys]: query t (this call) over key positions 0 .. start+t; later keys are 0 */
    readonly weights: Tensor<Float32Array>,
    readonly span: TokenSpan,
  ) {}

  /**
   * One trace of consecutive calls (a prefill and its decode steps) over the same layers and heads:
   * queries joined in order, keys up to the last position (later keys are 0, as in each call).
   */
  static concat(traces: AttentionTrace[]): AttentionTrace {
    const span = concatSpans(traces.map((t) => t.span), "AttentionTrace.concat");
    const { layers, heads } = traces[0];
    for (const [i, t] of traces.entries()) {
      if (t.layers.join() !== layers.join() || t.heads.join() !== heads.join()) {
        throw new RangeError(`AttentionTrace.concat: trace ${i} covers layers [${t.layers}] heads [${t.heads}], trace 0 layers [${layers}] heads [${heads}]`);
      }
    }
    const keys = span.start + span.ids.length;
    const padded = traces.map((t) => {
      const [L, Hn, T, S] = t.weights.shape;
      const data = new Float32Array(L * Hn * T * keys);
      for (let row = 0; row < L * Hn * T; row++) data.set(t.weights.data.subarray(row * S, (row + 1) * S), row * keys);
      return new Tensor([L, Hn, T, keys], data);
    });
    return new AttentionTrace(layers, heads, concatTokens(padded, 2, "AttentionTrace.concat"), span);
  }

  /**
   * One row per (layer, head, query position, key position) with a non-zero causal weight, and the
   * query's token text (when the tokenizer is known).
   */
  toArrow(options: { tokenizer?: TokenDecoder } = {}): Table {
    const texts = spanTexts(this.span, options.tokenizer);
    const [L, Hn, T, S] = this.weights.shape;
    const rows: number[][] = [[], [], [], [], []];
    const queryText: string[] = [];
    const weight: number[] = [];
    for (let l = 0; l < L; l++)
      for (let h = 0; h < Hn; h++)
        for (let t = 0; t < T; t++)
          for (let s = 0; s <= this.span.start + t && s < S; s++) {
            rows[4].push(this.span.ids[t]);
            if (texts) queryText.push(texts[t]);
            rows[0].push(this.layers[l]);
            rows[1].push(this.heads[h]);
            rows[2].push(this.span.start + t);
            rows[3].push(s);
            weight.push(this.weights.data[((l * Hn + h) * T + t) * S + s]);
          }
    return arrowTable({
      layer: Int32Array.from(rows[0]),
      head: Int32Array.from(rows[1]),
      query: Int32Array.from(rows[2]),
      query_token: Int32Array.from(rows[4]),
      ...(texts ? { query_token_text: queryText } : {}),
      key: Int32Array.from(rows[3]),
      weight: Float32Array.from(weight),
    });
  }
}

export class AttentionGateTrace {
  constructor(
    /** Model layer index of each attention layer (axis 0). */
    readonly layers: number[],
    /** [attention layers, T, heads * head_dim] sigmoid of the output gate */
    readonly values: Tensor<Float32Array>,
    readonly span: TokenSpan,
  ) {}

  /** One trace of consecutive calls, tokens joined in order. */
  static concat(traces: AttentionGateTrace[]): AttentionGateTrace {
    const span = concatSpans(traces.map((t) => t.span), "AttentionGateTrace.concat");
    return new AttentionGateTrace(traces[0].layers, concatTokens(traces.map((t) => t.values), 1, "AttentionGateTrace.concat"), span);
  }
}
