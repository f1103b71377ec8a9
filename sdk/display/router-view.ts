// How a RouterTrace shows itself: per layer (rows) and token (columns), the top-1 expert on its
// color, the full top-k and weights on hover, and the shared expert's mean gate per layer.
import { expertBackground } from "../plot/colors";
import { visibleToken } from "../plot/labels";
import { topExpert } from "../plot/top-expert";
import { RouterTrace } from "../trace/router";
import { spanTexts } from "../trace/span";
import { escapeHtml, htmlTable } from "./html";
import { registerView } from "./views";

const MAX_COLUMNS = 48;

function routerTraceMimeBundle(trace: RouterTrace): Record<string, unknown> {
  const { layers, tokens, k, experts, span } = trace;
  const shown = Math.min(tokens, MAX_COLUMNS);
  // Columns are named by the token's text when the trace knows its tokenizer (the id on hover), else by the id.
  const texts = spanTexts(span);
  const tokenCell = (t: number) =>
    texts
      ? `<span title="token ${span.ids[t]}" style="color: #888; white-space: pre;">${escapeHtml(visibleToken(texts[t]))}</span>`
      : `<span style="color: #888;">${span.ids[t]}</span>`;
  const header = ["layer", ...Array.from({ length: shown }, (_, t) => `${span.start + t}<br>${tokenCell(t)}`), "shared gate (mean)"];
  const rows: string[][] = [];
  for (let l = 0; l < layers; l++) {
    const row = [String(l)];
    for (let t = 0; t < shown; t++) {
      const chosen = trace.chosen(l, t).sort((a, b) => b.weight - a.weight);
      const title = escapeHtml(chosen.map((c) => `expert ${c.expert}: ${c.weight.toFixed(3)}`).join("\n"));
      const top = topExpert(trace, l, t);
      row.push(`<span title="${title}" style="display: inline-block; min-width: 2em; background: ${expertBackground(top)};">${top}</span>`);
    }
    let gate = 0;
    for (let t = 0; t < tokens; t++) gate += trace.sharedGate.get(l, t);
    row.push(tokens ? (gate / tokens).toFixed(3) : "");
    rows.push(row);
  }
  const more = tokens > shown ? ` (first ${shown} shown)` : "";
  const summary = `RouterTrace: ${layers} layers × ${tokens} tokens${more}, top-${k} of ${experts} experts, positions ${span.start}..${span.start + tokens - 1}`;
  const text = [summary, ...Array.from({ length: layers }, (_, l) => `layer ${l}: top-1 ${Array.from({ length: shown }, (_, t) => topExpert(trace, l, t)).join(" ")}`)];
  return {
    "text/html": htmlTable(header, rows, `${escapeHtml(summary)}; cells: top-1 expert (hover: top-${k} and weights); header: position and token ${texts ? "text" : "id"}`),
    "text/plain": text.join("\n"),
  };
}

registerView(RouterTrace, routerTraceMimeBundle);
