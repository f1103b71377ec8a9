// The residual stream captured after each layer (or after each layer's mixing sublayer).
import type { Table } from "apache-arrow";
import { arrowTable } from "../arrow";
import type { Tensor } from "../tensor";
import type { TokenSpan } from "./span";

/** Long form of a [layers, T, hidden] residual capture: one row per (layer, position) with its norm and values. */
export function residualToArrow(residual: Tensor<Float32Array>, span: TokenSpan): Table {
  const [L, T, H] = residual.shape;
  const n = L * T;
  const layer = new Int32Array(n);
  const position = new Int32Array(n);
  const norm = new Float32Array(n);
  for (let l = 0; l < L; l++)
    for (let t = 0; t < T; t++) {
      const i = l * T + t;
      layer[i] = l;
      position[i] = span.start + t;
      let s = 0;
      for (let d = 0; d < H; d++) s += residual.data[i * H + d] ** 2;
      norm[i] = Math.sqrt(s);
    }
  return arrowTable({ layer, position, norm });
}
