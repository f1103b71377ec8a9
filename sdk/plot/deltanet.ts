// Gated DeltaNet over a sequence: per head, the decay exp(g) that multiplies the memory before each
// token and the write strength beta; and the norm of the memory (the recurrent state) after each token.
import type { DeltaNetTrace } from "../trace/deltanet";
import { seriesColor } from "./colors";
import { Figure } from "./figure";
import type { PlotlyTrace } from "./figure-spec";
import { compact, resolveLabels, tokenAxis, type TokenDecoder } from "./labels";

export interface DeltaNetPlotOptions {
  /** Token labels (one per token of the trace); default: decoded with `tokenizer`, else positions. */
  labels?: string[];
  tokenizer?: TokenDecoder;
  title?: string;
}

// Values of `tensor` [layers, T, heads] for one layer and head, over tokens.
function series(tensor: DeltaNetTrace["beta"], layerIndex: number, head: number): number[] {
  const [, T, H] = tensor.shape;
  const out = new Array<number>(T);
  const data = tensor.index(layerIndex).data;
  for (let t = 0; t < T; t++) out[t] = data[t * H + head];
  return compact(out);
}

const positionsOf = (trace: DeltaNetTrace) => Array.from(trace.span.ids, (_, t) => trace.span.start + t);

/** Decay (top) and beta (bottom) of every head of one DeltaNet layer (a model layer index) over tokens. */
export function deltanetGates(trace: DeltaNetTrace, layer: number = trace.layers[0], options: DeltaNetPlotOptions = {}): Figure {
  const li = trace.indexOf(layer);
  const heads = trace.beta.shape[2];
  const x = positionsOf(trace);
  const labels = resolveLabels("deltanetGates", trace.span.ids, trace.span.start, options);
  const data: PlotlyTrace[] = [];
  for (let h = 0; h < heads; h++) {
    const line = { type: "scatter", mode: "lines+markers", x, legendgroup: `head ${h}`, line: { color: seriesColor(h) }, marker: { size: 4 } };
    data.push({ ...line, name: `head ${h}`, y: series(trace.decay, li, h), yaxis: "y", hovertemplate: `head ${h}, position %{x}: decay %{y}<extra></extra>` });
    data.push({ ...line, name: `head ${h}`, y: series(trace.beta, li, h), yaxis: "y2", showlegend: false, hovertemplate: `head ${h}, position %{x}: beta %{y}<extra></extra>` });
  }
  return new Figure(data, {
    title: { text: options.title ?? `DeltaNet gates of layer ${layer}: decay exp(g) keeps the memory, beta writes the token` },
    xaxis: { ...tokenAxis(x, labels, "token"), anchor: "y2" },
    yaxis: { title: { text: "decay exp(g)" }, domain: [0.55, 1], range: [0, 1.05] },
    yaxis2: { title: { text: "beta" }, domain: [0, 0.45], range: [0, 1.05] },
    height: 560,
  });
}

/**
 * Norm of the recurrent state after each token: one curve per DeltaNet layer (mean over heads), or
 * with `layer`, one curve per head of that layer.
 */
export function stateNormCurves(trace: DeltaNetTrace, options: DeltaNetPlotOptions & { layer?: number } = {}): Figure {
  const [, T, H] = trace.stateNorm.shape;
  const x = positionsOf(trace);
  const labels = resolveLabels("stateNormCurves", trace.span.ids, trace.span.start, options);
  const data: PlotlyTrace[] = [];
  if (options.layer !== undefined) {
    const li = trace.indexOf(options.layer);
    for (let h = 0; h < H; h++) {
      data.push({ type: "scatter", mode: "lines", name: `head ${h}`, x, y: series(trace.stateNorm, li, h), line: { color: seriesColor(h) } });
    }
  } else {
    trace.layers.forEach((layer, li) => {
      const norms = trace.stateNorm.index(li).data;
      const mean = new Array<number>(T).fill(0);
      for (let t = 0; t < T; t++) for (let h = 0; h < H; h++) mean[t] += norms[t * H + h] / H;
      data.push({ type: "scatter", mode: "lines", name: `layer ${layer}`, x, y: compact(mean), line: { color: seriesColor(li) } });
    });
  }
  const which = options.layer !== undefined ? `heads of layer ${options.layer}` : "mean over heads, per DeltaNet layer";
  return new Figure(data, {
    title: { text: options.title ?? `DeltaNet memory: norm of the recurrent state after each token (${which})` },
    xaxis: tokenAxis(x, labels, "token"),
    yaxis: { title: { text: "‖S‖ (Frobenius)" }, rangemode: "tozero" },
    height: 460,
  });
}
