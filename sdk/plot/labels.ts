// Token labels for axes and tables: each token's own text, with whitespace made visible.

/** Anything that turns ids into text (a Tokenizer). */
export interface TokenDecoder {
  decode(ids: ArrayLike<number>): string;
}

/** A token's text as a label: newlines, tabs and all-space tokens made visible ("↵", "⇥", "␣"). */
export function visibleToken(text: string): string {
  if (text.length > 0 && /^ +$/.test(text)) return "␣".repeat(text.length);
  return text.replace(/\r?\n/g, "↵").replace(/\t/g, "⇥");
}

/** The label of each id: its own decoded text, made visible. */
export function tokenLabels(decoder: TokenDecoder, ids: ArrayLike<number>): string[] {
  return Array.from(ids, (id) => visibleToken(decoder.decode([id])));
}

/** Labels for a plot: given ones (checked against the count), decoded ones, or the positions. */
export function resolveLabels(
  what: string,
  ids: ArrayLike<number>,
  start: number,
  options: { labels?: string[]; tokenizer?: TokenDecoder },
): string[] {
  if (options.labels) {
    if (options.labels.length !== ids.length) {
      throw new RangeError(`${what}: ${options.labels.length} labels given for ${ids.length} tokens`);
    }
    return options.labels;
  }
  if (options.tokenizer) return tokenLabels(options.tokenizer, ids);
  return Array.from(ids, (_, i) => String(start + i));
}

/** Plotly renders labels as a subset of HTML: escape what would be read as markup. */
export function plotlyText(text: string): string {
  return text.replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]!);
}

/** Numbers rounded to `digits` significant digits, as plain numbers: smaller JSON, same picture. */
export function compact(values: ArrayLike<number>, digits = 4): number[] {
  return Array.from(values, (v) => (Number.isFinite(v) ? Number(v.toPrecision(digits)) : v));
}

/**
 * A token axis: numeric positions with the tokens as tick text. Categories would merge repeated
 * tokens ("the" twice is one category).
 */
export function tokenAxis(positions: number[], labels: string[], title: string): Record<string, unknown> {
  return {
    title: { text: title },
    tickmode: "array",
    tickvals: positions,
    ticktext: labels.map(plotlyText),
    tickangle: labels.length > 12 ? -60 : 0,
    automargin: true,
  };
}
