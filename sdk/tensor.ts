// A dense row-major tensor over a typed array: what every capture and every logits result is.
import { viewMimeBundle } from "./display/views";

export type TensorData = Float32Array | Int32Array;

export class Tensor<D extends TensorData = TensorData> {
  readonly shape: number[];
  readonly data: D;

  constructor(shape: number[], data: D) {
    const size = shape.reduce((a, b) => a * b, 1);
    if (size !== data.length) {
      throw new Error(`Tensor: shape [${shape.join(", ")}] needs ${size} elements, data has ${data.length}`);
    }
    this.shape = shape;
    this.data = data;
  }

  get size(): number {
    return this.data.length;
  }

  /** Element at a full index. */
  get(...index: number[]): number {
    if (index.length !== this.shape.length) {
      throw new RangeError(`Tensor.get: expected ${this.shape.length} indices, got ${index.length}`);
    }
    let off = 0;
    for (let d = 0; d < index.length; d++) off = off * this.shape[d] + this.checkIndex(d, index[d]);
    return this.data[off];
  }

  /** The sub-tensor at index i of the first axis (a view sharing data): e.g. one layer of a trace. */
  index(i: number): Tensor<D> {
    const [, ...rest] = this.shape;
    this.checkIndex(0, i);
    const inner = rest.reduce((a, b) => a * b, 1);
    return new Tensor(rest, this.data.subarray(i * inner, (i + 1) * inner) as D);
  }

  /** Index i of `axis`, dropping that axis (a copy unless axis is 0): e.g. one token of every layer. */
  select(axis: number, i: number): Tensor<D> {
    this.checkAxis(axis);
    this.checkIndex(axis, i);
    const t = this.slice(axis, i, i + 1);
    return new Tensor(this.shape.filter((_, d) => d !== axis), t.data);
  }

  /** Indices [start, end) of `axis` (a copy unless axis is 0): e.g. a span of tokens. */
  slice(axis: number, start: number, end: number = this.shape[axis]): Tensor<D> {
    this.checkAxis(axis);
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end > this.shape[axis] || start > end) {
      throw new RangeError(`Tensor.slice: [${start}, ${end}) is not inside [0, ${this.shape[axis]}) on axis ${axis}`);
    }
    const outer = this.shape.slice(0, axis).reduce((a, b) => a * b, 1);
    const inner = this.shape.slice(axis + 1).reduce((a, b) => a * b, 1);
    const n = this.shape[axis];
    const shape = [...this.shape];
    shape[axis] = end - start;
    if (axis === 0) return new Tensor(shape, this.data.subarray(start * inner, end * inner) as D);
    const Ctor = this.data.constructor as { new (n: number): D };
    const out = new Ctor(outer * (end - start) * inner);
    for (let o = 0; o < outer; o++) {
      out.set(this.data.subarray((o * n + start) * inner, (o * n + end) * inner), o * (end - start) * inner);
    }
    return new Tensor(shape, out);
  }

  /** Index of the largest element (over all data, flattened). */
  argmax(): number {
    let best = 0;
    for (let i = 1; i < this.data.length; i++) if (this.data[i] > this.data[best]) best = i;
    return best;
  }

  toArray(): number[] {
    return Array.from(this.data);
  }

  /** Notebook display: dtype, shape and a preview of the values. */
  toMimeBundle(): Record<string, unknown> {
    return viewMimeBundle(this);
  }

  private checkAxis(axis: number): void {
    if (!Number.isInteger(axis) || axis < 0 || axis >= this.shape.length) {
      throw new RangeError(`Tensor: axis ${axis} is outside [0, ${this.shape.length})`);
    }
  }

  private checkIndex(axis: number, i: number): number {
    if (!Number.isInteger(i) || i < 0 || i >= this.shape[axis]) {
      throw new RangeError(`Tensor: index ${i} is outside [0, ${this.shape[axis]}) on axis ${axis}`);
    }
    return i;
  }
}
