// Comparisons of logit rows shared by the GPU suites.

/** The index of the largest value (the first of equal ones). */
export function argmax(a: Float32Array): number {
  let b = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[b]) b = i;
  return b;
}

/** The gap between the best and second-best logit, relative to the row's standard deviation. */
export function confidence(row: Float32Array): number {
  let best = -Infinity;
  let second = -Infinity;
  let sum = 0;
  let sq = 0;
  for (const x of row) {
    if (x > best) [best, second] = [x, best];
    else if (x > second) second = x;
    sum += x;
    sq += x * x;
  }
  const mean = sum / row.length;
  return (best - second) / Math.sqrt(Math.max(sq / row.length - mean * mean, 1e-30));
}

/** The largest |gpu − cpu| relative to the largest |cpu|. */
export function maxRelDiff(gpu: Float32Array, cpu: Float32Array): number {
  let worst = 0;
  let scale = 0;
  for (let i = 0; i < cpu.length; i++) {
    worst = Math.max(worst, Math.abs(gpu[i] - cpu[i]));
    scale = Math.max(scale, Math.abs(cpu[i]));
  }
  return worst / scale;
}
