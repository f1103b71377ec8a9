// How sure the model was at each token: the entropy of each prediction, beside the surprisal of the
// token that actually came (−log p), over the text.
import { entropy } from "../logits/entropy";
import { logSumExp } from "../logits/rows";
import type { Tensor } from "../tensor";
import type { TokenSpan } from "../trace/span";
import { seriesColor } from "./colors";
import { Figure } from "./figure";
import type { PlotlyTrace } from "./figure-spec";
import { compact, tokenAxis, visibleToken, type TokenDecoder } from "./labels";

export interface TokenEntropyOptions {
  /** Decodes the token labels (default: the result's tokenizer, else positions). */
  tokenizer?: TokenDecoder;
  /** Show the surprisal of each actual token beside the entropy (default true). */
  surprisal?: boolean;
  title?: string;
}

/**
 * Per-token entropy of a call's predictions (a prefill with logits: "all", or concatResults of a
 * generation). Each point is the prediction of the token on the axis, made after the tokens before it;
 * the last point, "⟨next⟩", is the prediction after the last token.
 */
export function tokenEntropy(result: { logits: Tensor<Float32Array>; span: TokenSpan }, options: TokenEntropyOptions = {}): Figure {
  const { logits, span } = result;
  const T = span.ids.length;
  if (logits.shape.length !== 2 || logits.shape[0] !== T) {
    throw new RangeError(`tokenEntropy: ${logits.shape[0]} rows of logits for ${T} tokens (prefill with logits: "all")`);
  }
  const V = logits.shape[1];
  const rows = Array.from({ length: T }, (_, t) => logits.data.subarray(t * V, (t + 1) * V));
  const x = Array.from({ length: T }, (_, t) => span.start + t + 1);
  const tokenizer = options.tokenizer ?? span.tokenizer;
  const labels = x.map((_, t) =>
    t === T - 1 ? "⟨next⟩" : tokenizer ? visibleToken(tokenizer.decode([span.ids[t + 1]])) : String(span.start + t + 1),
  );
  const data: PlotlyTrace[] = [
    { type: "scatter", mode: "lines+markers", name: "entropy (nats)", x, y: compact(rows.map(entropy)), line: { color: seriesColor(0) } },
  ];
  if (options.surprisal ?? true) {
    const surprisal = rows.slice(0, T - 1).map((row, t) => logSumExp(row, "tokenEntropy").lse - row[span.ids[t + 1]]);
    data.push({ type: "bar", name: "surprisal of the actual token (−log p)", x: x.slice(0, T - 1), y: compact(surprisal), marker: { color: seriesColor(1) }, opacity: 0.5 });
  }
  return new Figure(data, {
    title: { text: options.title ?? "How sure the model was: entropy of each prediction, and the surprisal of the token that came" },
    xaxis: tokenAxis(x, labels, "predicted token"),
    yaxis: { title: { text: "nats" }, rangemode: "tozero" },
    legend: { orientation: "h", y: -0.35 },
    height: 460,
  });
}
