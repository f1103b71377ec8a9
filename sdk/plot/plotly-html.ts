// The HTML that draws a figure with plotly.js offline. plotly.js (plotly.js-dist, ~10 MB) travels once:
// in the first figure's HTML of the process (one kernel = one notebook), guarded so that it defines
// window.Plotly only where it is not defined yet. Later figures wait for it.
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import type { FigureSpec } from "./figure-spec";

let library: string | undefined;
let libraryShipped = false;

function plotlyLibrary(): string {
  if (library === undefined) {
    const file = require.resolve("plotly.js-dist/plotly.js");
    library = fs.readFileSync(file, "utf8");
    // The library is inlined in a <script>; these would end it early.
    if (/<\/script|<!--/i.test(library)) throw new Error(`${file}: contains '</script' or '<!--' and cannot be inlined`);
  }
  return library;
}

/** The <script> that defines window.Plotly unless a previous output already did. */
function libraryScript(): string {
  return `<script type="text/javascript">if (typeof window.Plotly === "undefined") {\n${plotlyLibrary()}\n}</script>\n`;
}

/**
 * Makes the next figure carry plotly.js again: needed when the output that carried it was cleared
 * (its cell re-run) and the notebook is saved and reopened.
 */
export function resendPlotlyLibrary(): void {
  libraryShipped = false;
}

// JSON inside <script>: "<" escaped so that no string in the data ("</script>") closes the element.
const scriptJson = (value: unknown) => JSON.stringify(value).replace(/</g, "\\u003c");

function drawScript(id: string, spec: FigureSpec): string {
  return `<script type="text/javascript">
(function () {
  var fig = ${scriptJson(spec)};
  var tries = 0;
  function draw() {
    var el = document.getElementById(${JSON.stringify(id)});
    if (!el) return;
    if (window.Plotly) { window.Plotly.newPlot(el, fig.data, fig.layout, fig.config); return; }
    if (++tries < 400) { setTimeout(draw, 50); return; }
    el.textContent = "plotly.js did not load: the first figure of the notebook carries it. Re-run that cell, or call resendPlotlyLibrary() and re-run this one.";
  }
  draw();
})();
</script>`;
}

function container(id: string, spec: FigureSpec): string {
  const height = typeof spec.layout.height === "number" ? spec.layout.height : 450;
  return `<div id="${id}" class="moelens-figure" style="width: 100%; height: ${height}px;"></div>\n`;
}

/** A figure's notebook HTML; each call gets its own element id, so one figure can be shown twice. */
export function figureHtml(spec: FigureSpec): string {
  const id = `moelens-figure-${crypto.randomUUID()}`;
  const head = libraryShipped ? "" : libraryScript();
  libraryShipped = true;
  return head + container(id, spec) + drawScript(id, spec);
}

/** A complete page with plotly.js inlined. */
export function standalonePage(spec: FigureSpec, title: string): string {
  const id = "moelens-figure";
  const escapedTitle = title.replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]!);
  return `<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>${escapedTitle}</title></head><body>\n${libraryScript()}${container(id, spec)}${drawScript(id, spec)}\n</body></html>\n`;
}
