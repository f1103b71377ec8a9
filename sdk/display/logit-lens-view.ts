// The logit lens as an HTML table: layers down, positions across, the top token in each cell (top-k
// and logits on hover). `session.logitLens` returns plain rows; wrap them to display:
//   display(new LogitLensTable(await s.logitLens(r), model.tokenizer))
import type { LensTop } from "../lens";
import { visibleToken, type TokenDecoder } from "../plot/labels";
import { escapeHtml, htmlTable } from "./html";

export class LogitLensTable {
  constructor(
    readonly rows: LensTop[],
    private readonly tokenizer?: TokenDecoder,
    /** Labels of the input tokens, one per position of the lens (shown in the header). */
    private readonly labels?: string[],
  ) {
    if (rows.length === 0) throw new Error("LogitLensTable: no lens rows");
  }

  private name(id: number): string {
    return this.tokenizer ? visibleToken(this.tokenizer.decode([id])) : String(id);
  }

  toMimeBundle(): Record<string, unknown> {
    const layers = [...new Set(this.rows.map((r) => r.layer))];
    const positions = [...new Set(this.rows.map((r) => r.position))];
    if (this.labels && this.labels.length !== positions.length) {
      throw new RangeError(`LogitLensTable: ${this.labels.length} labels given for ${positions.length} positions`);
    }
    const cell = new Map(this.rows.map((r) => [`${r.layer}:${r.position}`, r]));
    const header = ["layer", ...positions.map((p, i) => (this.labels ? `${p}<br>${escapeHtml(this.labels[i])}` : String(p)))];
    const html: string[][] = [];
    const text: string[] = [`logit lens: top-1 token per layer (rows) and position (columns ${positions.join(", ")})`];
    for (const l of layers) {
      const row = [String(l)];
      const plain: string[] = [];
      for (const p of positions) {
        const r = cell.get(`${l}:${p}`);
        if (!r) {
          row.push("");
          plain.push("-");
          continue;
        }
        const title = escapeHtml(r.ids.map((id, i) => `${this.name(id)}  ${r.logits[i].toFixed(2)}`).join("\n"));
        row.push(`<span title="${title}">${escapeHtml(this.name(r.ids[0]))}</span>`);
        plain.push(JSON.stringify(this.name(r.ids[0])));
      }
      html.push(row);
      text.push(`layer ${l}: ${plain.join(" ")}`);
    }
    return {
      "text/html": htmlTable(header, html, "Logit lens: top token after each layer (hover: top-k and logits)", "center"),
      "text/plain": text.join("\n"),
    };
  }
}
