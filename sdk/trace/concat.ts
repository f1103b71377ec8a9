// Joining the tensors of consecutive calls along their token axis.
import { Tensor, type TensorData } from "../tensor";

/**
 * Concatenates tensors along `axis` (the token axis); every other axis must match. `what` names the
 * caller in errors.
 */
export function concatTokens<D extends TensorData>(tensors: Tensor<D>[], axis: number, what: string): Tensor<D> {
  const first = tensors[0];
  for (const [i, t] of tensors.entries()) {
    const same = t.shape.length === first.shape.length && t.shape.every((n, d) => d === axis || n === first.shape[d]);
    if (!same) throw new RangeError(`${what}: trace ${i} has shape [${t.shape.join(", ")}], trace 0 [${first.shape.join(", ")}] (only the token axis may differ)`);
  }
  const outer = first.shape.slice(0, axis).reduce((a, b) => a * b, 1);
  const inner = first.shape.slice(axis + 1).reduce((a, b) => a * b, 1);
  const total = tensors.reduce((n, t) => n + t.shape[axis], 0);
  const Ctor = first.data.constructor as { new (n: number): D };
  const out = new Ctor(outer * total * inner);
  for (let o = 0; o < outer; o++) {
    let at = (o * total) * inner;
    for (const t of tensors) {
      const n = t.shape[axis] * inner;
      out.set(t.data.subarray(o * n, (o + 1) * n), at);
      at += n;
    }
  }
  const shape = [...first.shape];
  shape[axis] = total;
  return new Tensor(shape, out);
}
