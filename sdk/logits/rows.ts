// The two shapes logits come in: one row (a vocabulary's scores) or a [rows, vocab] Tensor.
import type { Tensor } from "../tensor";

/** One row of logits: a `Float32Array` from `result.logits.data`, a `Tensor.index(t)`, or plain numbers. */
export type LogitsRow = ArrayLike<number> | Tensor<Float32Array>;

export function rowValues(row: LogitsRow): ArrayLike<number> {
  return "shape" in row && "data" in row ? row.data : (row as ArrayLike<number>);
}

/** The rows of a [rows, vocab] tensor, as views. */
export function rowsOf(logits: Tensor<Float32Array>, what: string): Float32Array[] {
  if (logits.shape.length !== 2) throw new RangeError(`${what}: logits must be [rows, vocab], got [${logits.shape.join(", ")}]`);
  const [R, V] = logits.shape;
  return Array.from({ length: R }, (_, r) => logits.data.subarray(r * V, (r + 1) * V));
}

/** log Σ exp(x), computed around the maximum; refuses rows with no finite score or with a NaN. */
export function logSumExp(x: ArrayLike<number>, what: string): { max: number; lse: number } {
  if (x.length === 0) throw new RangeError(`${what}: the logits row is empty`);
  let max = -Infinity;
  for (let i = 0; i < x.length; i++) {
    const v = x[i];
    if (Number.isNaN(v)) throw new RangeError(`${what}: logit ${i} is NaN`);
    if (v === Infinity) throw new RangeError(`${what}: logit ${i} is +Infinity`);
    if (v > max) max = v;
  }
  if (max === -Infinity) throw new RangeError(`${what}: every logit is -Infinity`);
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += Math.exp(x[i] - max);
  return { max, lse: max + Math.log(sum) };
}
