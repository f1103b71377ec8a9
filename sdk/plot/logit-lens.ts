// The logit lens as a table: for each layer (rows) and position (columns), the token the model would
// predict if the residual stream stopped there, colored by how sure it is.
import type { LensTop } from "../lens";
import { Figure } from "./figure";
import { compact, plotlyText, tokenAxis, visibleToken, type TokenDecoder } from "./labels";

export interface LogitLensTableOptions {
  /** Decodes the predicted tokens (default: ids are shown). */
  tokenizer?: TokenDecoder;
  /** Labels of the input token at each position of the lens (in order of first appearance). */
  labels?: string[];
  title?: string;
}

/** Characters of a predicted token shown in its cell. */
const MAX_CELL_CHARS = 6;

/** The lens grid of `session.logitLens(...)`: cell text = top-1 token, color = top-1 logit. */
export function logitLensTable(rows: LensTop[], options: LogitLensTableOptions = {}): Figure {
  if (rows.length === 0) throw new Error("logitLensTable: no lens rows");
  const layers = [...new Set(rows.map((r) => r.layer))];
  const positions = [...new Set(rows.map((r) => r.position))];
  if (options.labels && options.labels.length !== positions.length) {
    throw new RangeError(`logitLensTable: ${options.labels.length} labels given for ${positions.length} positions`);
  }
  const name = (id: number) => plotlyText(options.tokenizer ? visibleToken(options.tokenizer.decode([id])) : String(id));
  // A cell is narrow: long tokens are cut so that neighbouring cells' text cannot overlap (hover shows it whole).
  const cellText = (id: number) => {
    const text = options.tokenizer ? visibleToken(options.tokenizer.decode([id])) : String(id);
    const chars = [...text];
    return plotlyText(chars.length > MAX_CELL_CHARS ? `${chars.slice(0, MAX_CELL_CHARS - 1).join("")}…` : text);
  };
  const cell = new Map(rows.map((r) => [`${r.layer}:${r.position}`, r]));
  const z: (number | null)[][] = [];
  const text: string[][] = [];
  const hover: string[][] = [];
  for (const l of layers) {
    const zRow: (number | null)[] = [];
    const textRow: string[] = [];
    const hoverRow: string[] = [];
    for (const p of positions) {
      const r = cell.get(`${l}:${p}`);
      zRow.push(r ? compact([r.logits[0]], 3)[0] : null);
      textRow.push(r ? cellText(r.ids[0]) : "");
      hoverRow.push(r ? r.ids.map((id, i) => `${name(id)} (${r.logits[i].toFixed(2)})`).join("<br>") : "");
    }
    z.push(zRow);
    text.push(textRow);
    hover.push(hoverRow);
  }
  const labels = options.labels ?? positions.map(String);
  return new Figure(
    [
      {
        type: "heatmap",
        z,
        x: positions,
        y: layers,
        text,
        texttemplate: "%{text}",
        textfont: { size: 10 },
        customdata: hover,
        colorscale: "Blues",
        reversescale: true,
        colorbar: { title: { text: "top-1 logit" } },
        xgap: 1,
        ygap: 1,
        hovertemplate: "layer %{y}, position %{x}<br>%{customdata}<extra></extra>",
      },
    ],
    {
      title: { text: options.title ?? "Logit lens: the top token after each layer (rows) at each position (columns)" },
      xaxis: tokenAxis(positions, labels, "input token"),
      yaxis: { title: { text: "layer" }, autorange: "reversed", tickmode: "array", tickvals: layers },
      height: Math.min(1200, 260 + 40 * layers.length),
    },
  );
}
