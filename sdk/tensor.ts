// A dense row-major tensor over a typed array: what every capture and every logits result is.
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
    return this.data[this.offset(index)];
  }

  /** The sub-tensor at a leading index (a view: it shares data). */
  index(i: number): Tensor<D> {
    const [first, ...rest] = this.shape;
    if (!Number.isInteger(i) || i < 0 || i >= first) {
      throw new RangeError(`Tensor.index: ${i} is outside [0, ${first})`);
    }
    const inner = rest.reduce((a, b) => a * b, 1);
    return new Tensor(rest, this.data.subarray(i * inner, (i + 1) * inner) as D);
  }

  /** Index of the largest element of a 1-D tensor, or of each row of the last axis flattened. */
  argmax(): number {
    let best = 0;
    for (let i = 1; i < this.data.length; i++) if (this.data[i] > this.data[best]) best = i;
    return best;
  }

  toArray(): number[] {
    return Array.from(this.data);
  }

  private offset(index: number[]): number {
    if (index.length !== this.shape.length) {
      throw new RangeError(`Tensor.get: expected ${this.shape.length} indices, got ${index.length}`);
    }
    let off = 0;
    for (let d = 0; d < index.length; d++) {
      const i = index[d];
      if (!Number.isInteger(i) || i < 0 || i >= this.shape[d]) {
        throw new RangeError(`Tensor.get: index ${i} is outside [0, ${this.shape[d]}) on axis ${d}`);
      }
      off = off * this.shape[d] + i;
    }
    return off;
  }
}
