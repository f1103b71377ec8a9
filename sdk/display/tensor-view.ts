// How a Tensor shows itself: dtype, shape, a numpy-style preview (edges of each axis when it is
// large) and, in HTML, the value range.
import { Tensor } from "../tensor";
import { escapeHtml } from "./html";
import { registerView } from "./views";

const EDGE = 3;
const FULL_BELOW = 1000;

function dtype(t: Tensor): string {
  return t.data instanceof Int32Array ? "int32" : "float32";
}

function formatValue(v: number, integer: boolean): string {
  if (integer || !Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a >= 1e5 || a < 1e-3) ? v.toExponential(3) : v.toFixed(4);
}

/** Nested-bracket preview; with `summarize`, axes longer than 2·EDGE show their edges around "...". */
function tensorPreview(t: Tensor): string {
  const { shape, data } = t;
  const integer = data instanceof Int32Array;
  const summarize = data.length > FULL_BELOW;
  const strides = shape.map((_, d) => shape.slice(d + 1).reduce((a, b) => a * b, 1));
  const indices = (n: number): (number | null)[] =>
    summarize && n > 2 * EDGE ? [...[...Array(EDGE).keys()], null, ...[...Array(EDGE).keys()].map((i) => n - EDGE + i)] : [...Array(n).keys()];
  const render = (axis: number, offset: number, indent: string): string => {
    if (shape.length === 0) return formatValue(data[0], integer);
    const idx = indices(shape[axis]);
    if (axis === shape.length - 1) {
      return `[${idx.map((i) => (i === null ? "..." : formatValue(data[offset + i], integer))).join(", ")}]`;
    }
    const inner = indent + " ";
    const separator = "," + "\n".repeat(shape.length - 1 - axis) + inner;
    return `[${idx.map((i) => (i === null ? "..." : render(axis + 1, offset + i * strides[axis], inner))).join(separator)}]`;
  };
  return render(0, 0, "");
}

function range(t: Tensor): { min: number; max: number; mean: number } | undefined {
  if (t.data.length === 0) return undefined;
  let min = Infinity;
  let max = -Infinity;
  let sum = 0;
  for (const v of t.data) {
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v;
  }
  return { min, max, mean: sum / t.data.length };
}

function tensorMimeBundle(t: Tensor): Record<string, unknown> {
  const head = `Tensor ${dtype(t)} [${t.shape.join(", ")}]`;
  const preview = tensorPreview(t);
  const r = range(t);
  const stats = r ? `min ${formatValue(r.min, false)} · max ${formatValue(r.max, false)} · mean ${formatValue(r.mean, false)}` : "empty";
  return {
    "text/html": `<div class="moelens-tensor"><div><b>Tensor</b> ${dtype(t)} [${t.shape.join(", ")}] · ${t.size} elements · ${stats}</div><pre style="font-size: 11px; line-height: 1.3;">${escapeHtml(preview)}</pre></div>`,
    "text/plain": `${head}\n${preview}`,
  };
}

registerView(Tensor, tensorMimeBundle);
