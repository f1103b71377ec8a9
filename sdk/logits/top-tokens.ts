// The most likely next tokens with their text, probability and logit.
import { topK } from "../lens";
import type { TokenDecoder } from "../plot/labels";
import { logSumExp, rowValues, type LogitsRow } from "./rows";

export interface TopToken {
  id: number;
  /** The token's own decoded text (when a tokenizer was given). */
  text?: string;
  logit: number;
  /** softmax probability over the whole row */
  prob: number;
  logProb: number;
}

/** The k highest-scoring tokens of a row, best first: `topTokens(r.logits.index(0), 5, model.tokenizer)`. */
export function topTokens(row: LogitsRow, k: number, tokenizer?: TokenDecoder): TopToken[] {
  const x = rowValues(row);
  if (!Number.isInteger(k) || k < 1) throw new RangeError(`topTokens: k must be a positive integer, got ${k}`);
  const { lse } = logSumExp(x, "topTokens");
  const values = x instanceof Float32Array ? x : Float32Array.from(x);
  const best = topK(values, Math.min(k, x.length));
  return best.ids.map((id, i) => {
    const logit = best.logits[i];
    const token: TopToken = { id, logit, prob: Math.exp(logit - lse), logProb: logit - lse };
    if (tokenizer) token.text = tokenizer.decode([id]);
    return token;
  });
}
