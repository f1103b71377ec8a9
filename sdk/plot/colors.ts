// One stable color per expert (and per head): hues spaced by the golden angle, so neighbouring ids
// differ clearly for any number of experts.

const GOLDEN_ANGLE = 137.508;

function hue(i: number): number {
  return (i * GOLDEN_ANGLE) % 360;
}

/** A saturated color for lines and heatmap cells. */
export function expertColor(expert: number): string {
  return `hsl(${hue(expert).toFixed(1)}, 62%, 52%)`;
}

// Plotly's default qualitative palette: clearly different colors for a handful of lines.
const SERIES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/** A line color for the i-th series (heads, layers): the same i gets the same color in every subplot. */
export function seriesColor(i: number): string {
  return SERIES[i % SERIES.length];
}

/** A light color for the background of text (token streams, tables). */
export function expertBackground(expert: number): string {
  return `hsl(${hue(expert).toFixed(1)}, 75%, 84%)`;
}

/**
 * A discrete Plotly colorscale for z values 0 .. n-1 (use zmin -0.5, zmax n-0.5): each integer gets
 * expertColor(i) over its own band.
 */
export function categoricalColorscale(n: number): [number, string][] {
  const scale: [number, string][] = [];
  for (let i = 0; i < n; i++) {
    scale.push([i / n, expertColor(i)], [(i + 1) / n, expertColor(i)]);
  }
  return scale;
}
