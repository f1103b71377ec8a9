// Summaries of repeated measurements.

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

// (max - min) / median: how far repeated runs of one measurement disagree.
export function spread(xs: number[]): number {
  return (Math.max(...xs) - Math.min(...xs)) / median(xs);
}

export function stddev(xs: number[]): number {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  return Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, xs.length - 1));
}
