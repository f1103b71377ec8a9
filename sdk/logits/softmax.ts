// Probabilities and log-probabilities from logits (temperature-scaled softmax).
import { logSumExp, rowValues, type LogitsRow } from "./rows";

function scaled(row: LogitsRow, temperature: number, what: string): ArrayLike<number> {
  const x = rowValues(row);
  if (!(temperature > 0) || !Number.isFinite(temperature)) throw new RangeError(`${what}: temperature must be a number > 0, got ${temperature}`);
  return temperature === 1 ? x : Array.from(x, (v) => v / temperature);
}

/** log softmax(row / temperature), in float64. */
export function logSoftmax(row: LogitsRow, temperature = 1): Float64Array {
  const x = scaled(row, temperature, "logSoftmax");
  const { lse } = logSumExp(x, "logSoftmax");
  return Float64Array.from(x, (v) => v - lse);
}

/** softmax(row / temperature): the next-token distribution, in float64 (sums to 1). */
export function softmax(row: LogitsRow, temperature = 1): Float64Array {
  return logSoftmax(row, temperature).map(Math.exp);
}

/** log p(id) under softmax(row): the log-probability of one token. */
export function logProb(row: LogitsRow, id: number): number {
  const x = rowValues(row);
  if (!Number.isInteger(id) || id < 0 || id >= x.length) throw new RangeError(`logProb: token id ${id} is not an integer in [0, ${x.length})`);
  return x[id] - logSumExp(x, "logProb").lse;
}
