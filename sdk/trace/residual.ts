// The residual stream captured after each layer (or after each layer's mixing sublayer).
import type { Table } from "apache-arrow";
import { arrowTable } from "../arrow";
import type { TokenDecoder } from "../plot/labels";
import type { Tensor } from "../tensor";
import { spanTexts, type TokenSpan } from "./span";

/**
 * Long form of a [layers, T, hidden] residual capture: one row per (layer, position) with the token,
 * its text (when the tokenizer is known) and the residual's norm.
 */
export function residualToArrow(residual: Tensor<Float32Array>, span: TokenSpan, options: { tokenizer?: TokenDecoder } = {}): Table {
  const texts = spanTexts(span, options.tokenizer);
  const [L, T, H] = residual.shape;
  const n = L * T;
  const token = new Int32Array(n);
  const tokenText: string[] = [];
  const layer = new Int32Array(n);
  const position = new Int32Array(n);
  const norm = new Float32Array(n);
  for (let l = 0; l < L; l++)
    for (let t = 0; t < T; t++) {
      const i = l * T + t;
      token[i] = span.ids[t];
      if (texts) tokenText.push(texts[t]);
      layer[i] = l;
      position[i] = span.start + t;
      let s = 0;
      for (let d = 0; d < H; d++) s += residual.data[i * H + d] ** 2;
      norm[i] = Math.sqrt(s);
    }
  return arrowTable({ token, ...(texts ? { token_text: tokenText } : {}), layer, position, norm });
}
