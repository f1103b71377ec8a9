// The values a forward call captured, by hook point name (TransformerLens' ActivationCache).
import { Tensor, type TensorData } from "../tensor";

export class ActivationCache {
  private readonly values: Map<string, Tensor>;

  /** @internal */
  constructor(entries: Iterable<[string, Tensor]>) {
    this.values = new Map(entries);
  }

  /** The captured value of one hook point: [n, ...] (positions kept), or [heads, n, context] for attn.probs. */
  get(name: string): Tensor {
    const t = this.values.get(name);
    if (!t) {
      const known = [...this.values.keys()];
      throw new RangeError(
        `ActivationCache: '${name}' was not captured (${known.length ? `captured: ${abbreviate(known)}` : "nothing was captured"})`,
      );
    }
    return t;
  }

  has(name: string): boolean {
    return this.values.has(name);
  }

  /** Captured names, in the order the forward pass produced them. */
  names(): string[] {
    return [...this.values.keys()];
  }

  get size(): number {
    return this.values.size;
  }

  [Symbol.iterator](): IterableIterator<[string, Tensor]> {
    return this.values.entries();
  }

  /**
   * One hook point over the given layers, stacked: `stack("blocks.{l}.resid_post", [0, 1, 2])` is
   * [3, n, hidden]. Without layers: every captured layer, in order.
   */
  stack<D extends TensorData = Float32Array>(template: string, layers?: number[]): Tensor<D> {
    if (!template.includes("{l}")) throw new RangeError(`ActivationCache.stack: '${template}' has no {l}`);
    const chosen = layers ?? this.layersOf(template);
    if (chosen.length === 0) throw new RangeError(`ActivationCache.stack: no layer of '${template}' was captured`);
    const parts = chosen.map((l) => this.get(template.replace("{l}", String(l))) as Tensor<D>);
    const first = parts[0];
    const Ctor = first.data.constructor as { new (n: number): D };
    const data = new Ctor(first.size * parts.length);
    parts.forEach((p, i) => data.set(p.data as never, i * first.size));
    return new Tensor([parts.length, ...first.shape], data);
  }

  /** The layers captured for a template, ascending. */
  layersOf(template: string): number[] {
    const [before, after] = template.split("{l}");
    const out: number[] = [];
    for (const name of this.values.keys()) {
      if (!name.startsWith(before) || !name.endsWith(after)) continue;
      const l = name.slice(before.length, name.length - after.length);
      if (/^\d+$/.test(l)) out.push(Number(l));
    }
    return out.sort((a, b) => a - b);
  }
}

function abbreviate(names: string[]): string {
  return names.length <= 6 ? names.join(", ") : `${names.slice(0, 6).join(", ")} and ${names.length - 6} more`;
}
