// Expert load over any span of routing (one call, a decode run, a whole session): counts and
// probability mass per layer x expert, and the balance statistics researchers report.
import type { Table } from "apache-arrow";
import { arrowTable } from "../arrow";
import { viewMimeBundle } from "../display/views";
import { Tensor } from "../tensor";
import type { RouterTrace } from "./router";

export class ExpertLoad {
  /** [layers, experts] number of (token, slot) selections */
  readonly counts: Tensor<Float32Array>;
  /** [layers, experts] summed router probability */
  readonly mass: Tensor<Float32Array>;
  /** tokens accumulated (per layer) */
  tokens = 0;

  constructor(
    readonly layers: number,
    readonly experts: number,
    readonly k: number,
  ) {
    this.counts = new Tensor([layers, experts], new Float32Array(layers * experts));
    this.mass = new Tensor([layers, experts], new Float32Array(layers * experts));
  }

  static from(traces: RouterTrace[]): ExpertLoad {
    if (traces.length === 0) throw new Error("ExpertLoad.from: no traces");
    const load = new ExpertLoad(traces[0].layers, traces[0].experts, traces[0].k);
    for (const t of traces) load.add(t);
    return load;
  }

  add(trace: RouterTrace): this {
    if (trace.layers !== this.layers || trace.experts !== this.experts || trace.k !== this.k) {
      throw new Error("ExpertLoad.add: the trace comes from a model of another shape");
    }
    const [L, T, K] = trace.ids.shape;
    const E = this.experts;
    for (let l = 0; l < L; l++) {
      for (let t = 0; t < T; t++) {
        for (let s = 0; s < K; s++) this.counts.data[l * E + trace.ids.data[(l * T + t) * K + s]] += 1;
        const p = trace.probs.data.subarray((l * T + t) * E, (l * T + t + 1) * E);
        for (let e = 0; e < E; e++) this.mass.data[l * E + e] += p[e];
      }
    }
    this.tokens += T;
    return this;
  }

  /** Share of the layer's tokens that chose each expert (sums to k). */
  fraction(layer: number): Float64Array {
    return Float64Array.from(this.counts.index(layer).data, (c) => (this.tokens ? c / this.tokens : 0));
  }

  /** Entropy (nats) of the layer's selection distribution; log(experts) is perfectly balanced. */
  entropy(layer: number): number {
    const c = this.counts.index(layer).data;
    const total = c.reduce((a, b) => a + b, 0);
    let h = 0;
    for (const x of c) if (x > 0) h -= (x / total) * Math.log(x / total);
    return h;
  }

  /** Coefficient of variation (std / mean) of the layer's selection counts; 0 is perfectly balanced. */
  coefficientOfVariation(layer: number): number {
    const c = this.counts.index(layer).data;
    const mean = c.reduce((a, b) => a + b, 0) / c.length;
    if (mean === 0) return 0;
    const variance = c.reduce((a, x) => a + (x - mean) ** 2, 0) / c.length;
    return Math.sqrt(variance) / mean;
  }

  /**
   * The auxiliary load-balance loss as training computes it (Switch / transformers'
   * load_balancing_loss_func): E · Σ_e f_e · P_e, where f_e is the number of selections of expert e
   * per row (summing to k over experts) and P_e its mean router probability, over the given layer or
   * over all layers' rows together (as in training, where the layers' router logits are
   * concatenated). Perfectly balanced routing with uniform probabilities gives k.
   */
  auxLoss(layer?: number): number {
    const layers = layer === undefined ? [...Array(this.layers).keys()] : [layer];
    const rows = this.tokens * layers.length;
    if (rows === 0) return 0;
    let loss = 0;
    for (let e = 0; e < this.experts; e++) {
      let count = 0;
      let mass = 0;
      for (const l of layers) {
        count += this.counts.get(l, e);
        mass += this.mass.get(l, e);
      }
      loss += (count / rows) * (mass / rows);
    }
    return loss * this.experts;
  }

  /** Notebook display: balance statistics per layer and the layer x expert heatmap. */
  toMimeBundle(): Record<string, unknown> {
    return viewMimeBundle(this);
  }

  /** One row per (layer, expert): count, fraction, mass. */
  toArrow(): Table {
    const n = this.layers * this.experts;
    const layer = new Int32Array(n);
    const expert = new Int32Array(n);
    const fraction = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      layer[i] = Math.floor(i / this.experts);
      expert[i] = i % this.experts;
      fraction[i] = this.tokens ? this.counts.data[i] / this.tokens : 0;
    }
    return arrowTable({ layer, expert, count: this.counts.data, fraction, mass: this.mass.data });
  }
}
