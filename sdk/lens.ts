// The logit lens: the final norm and the lm_head applied to the residual stream after any layer, to
// see what the model "would say" at that depth.
import type { NativeModel } from "./native";
import { Tensor } from "./tensor";

export interface LensTop {
  layer: number;
  position: number;
  /** Token ids, best first. */
  ids: number[];
  logits: number[];
}

/** Logits [rows, vocab] for residual rows [rows, hidden]; with `applyNorm` (default) the final RMSNorm first. */
export async function unembed(
  native: NativeModel,
  rows: Float32Array,
  vocab: number,
  applyNorm = true,
): Promise<Tensor<Float32Array>> {
  const logits = await native.unembed(rows, applyNorm);
  return new Tensor([logits.length / vocab, vocab], logits);
}

/** The k largest entries of a row, best first (a bounded insertion, not a full sort of the vocabulary). */
export function topK(row: Float32Array, k: number): { ids: number[]; logits: number[] } {
  const ids: number[] = [];
  for (let i = 0; i < row.length; i++) {
    if (ids.length === k && row[i] <= row[ids[k - 1]]) continue;
    let j = ids.length < k ? ids.length : k - 1;
    ids[j] = i;
    while (j > 0 && row[ids[j]] > row[ids[j - 1]]) {
      [ids[j], ids[j - 1]] = [ids[j - 1], ids[j]];
      j--;
    }
  }
  return { ids, logits: ids.map((i) => row[i]) };
}
