// How well the model predicts a text: per-token negative log-likelihood and perplexity.
import type { Tensor } from "../tensor";
import { logSumExp, rowsOf } from "./rows";

/**
 * −log p(targets[r]) under row r of [rows, vocab] logits, for each row: the loss of each target token,
 * in nats.
 */
export function tokenNll(logits: Tensor<Float32Array>, targets: ArrayLike<number>): Float64Array {
  const rows = rowsOf(logits, "tokenNll");
  if (targets.length !== rows.length) throw new RangeError(`tokenNll: ${targets.length} targets for ${rows.length} rows of logits`);
  return Float64Array.from(rows, (row, r) => {
    const id = targets[r];
    if (!Number.isInteger(id) || id < 0 || id >= row.length) throw new RangeError(`tokenNll: target ${r} (${id}) is not a token id in [0, ${row.length})`);
    return logSumExp(row, "tokenNll").lse - row[id];
  });
}

/**
 * The loss of each token of a text after the first: row t of the prefill's logits (logits: "all")
 * predicts ids[t + 1]. Returns ids.length − 1 values; value i belongs to token i + 1.
 */
export function nextTokenNll(logits: Tensor<Float32Array>, ids: ArrayLike<number>): Float64Array {
  if (logits.shape[0] !== ids.length) {
    throw new RangeError(`nextTokenNll: ${logits.shape[0]} rows of logits for ${ids.length} tokens (prefill with logits: "all")`);
  }
  if (ids.length < 2) throw new RangeError("nextTokenNll: needs at least two tokens (the first one is never predicted)");
  return tokenNll(logits.slice(0, 0, ids.length - 1), Array.prototype.slice.call(ids, 1) as number[]);
}

/** exp(mean NLL): the perplexity of per-token losses (e.g. of nextTokenNll). */
export function perplexity(nll: ArrayLike<number>): number {
  if (nll.length === 0) throw new RangeError("perplexity: no token losses");
  let sum = 0;
  for (let i = 0; i < nll.length; i++) sum += nll[i];
  return Math.exp(sum / nll.length);
}
