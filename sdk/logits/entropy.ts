// How unsure the model is: the entropy of its next-token distribution.
import type { Tensor } from "../tensor";
import { logSumExp, rowValues, rowsOf, type LogitsRow } from "./rows";

/** Entropy in nats of softmax(row): 0 when one token takes all the mass, log(vocab) when uniform. */
export function entropy(row: LogitsRow): number {
  const x = rowValues(row);
  const { lse } = logSumExp(x, "entropy");
  let h = 0;
  for (let i = 0; i < x.length; i++) {
    const logP = x[i] - lse;
    if (logP > -Infinity) h -= Math.exp(logP) * logP;
  }
  return h;
}

/** The entropy of every row of [rows, vocab] logits (e.g. a prefill with logits: "all"). */
export function entropies(logits: Tensor<Float32Array>): Float64Array {
  return Float64Array.from(rowsOf(logits, "entropies"), entropy);
}
