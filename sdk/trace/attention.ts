// Attention layers: softmax weights of chosen layers and heads, and the output gate values.
import type { Table } from "apache-arrow";
import { arrowTable } from "../arrow";
import type { Tensor } from "../tensor";
import type { TokenSpan } from "./span";

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

  /** One row per (layer, head, query position, key position) with a non-zero causal weight. */
  toArrow(): Table {
    const [L, Hn, T, S] = this.weights.shape;
    const rows: number[][] = [[], [], [], []];
    const weight: number[] = [];
    for (let l = 0; l < L; l++)
      for (let h = 0; h < Hn; h++)
        for (let t = 0; t < T; t++)
          for (let s = 0; s <= this.span.start + t && s < S; s++) {
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
}
