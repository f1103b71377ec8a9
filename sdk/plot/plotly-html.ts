// The HTML that draws a figure with plotly.js offline. plotly.js (plotly.js-dist-min: 4.8 MB, 1.9 MB
// once gzipped and base64-encoded) travels once: in the first figure's HTML of the process (one
// kernel = one notebook), guarded so that it defines window.Plotly only where it is not defined yet.
// Later figures wait for it. The browser inflates it with DecompressionStream, which keeps an
// executed notebook small.
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as zlib from "node:zlib";
import type { FigureSpec } from "./figure-spec";

let library: { version: string; gzipBase64: string } | undefined;
let libraryShipped = false;

function plotlyLibrary(): { version: string; gzipBase64: string } {
  if (library === undefined) {
    const file = require.resolve("plotly.js-dist-min/plotly.min.js");
    const { version } = JSON.parse(fs.readFileSync(path.join(path.dirname(file), "package.json"), "utf8")) as { version: string };
    library = { version, gzipBase64: zlib.gzipSync(fs.readFileSync(file), { level: 9 }).toString("base64") };
  }
  return library;
}

/**
 * The <script> that defines window.Plotly unless a previous output already did (or is doing so).
 * An AMD loader on the page (the classic notebook's require.js) would take plotly.js's UMD bundle
 * as a module, so `define` is hidden while it runs. `window.moelensPlotlyLoading` is true while the
 * library is being inflated, so that figures keep waiting for it however long that takes; a failure
 * is kept in `window.moelensPlotlyError`.
 */
function libraryScript(): string {
  const { version, gzipBase64 } = plotlyLibrary();
  return `<script type="text/javascript">/* plotly.js v${version} (plotly.js-dist-min), gzip, base64 */
if (typeof window.Plotly === "undefined" && !window.moelensPlotlyLoading) {
  window.moelensPlotlyLoading = true;
  (function () {
    function settle(error) {
      if (error) window.moelensPlotlyError = String(error);
      window.moelensPlotlyLoading = false;
    }
    try {
      var packed = "${gzipBase64}";
      var bytes = Uint8Array.from(atob(packed), function (c) { return c.charCodeAt(0); });
      var source = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      new Response(source).text().then(function (code) {
        var amd = window.define;
        window.define = undefined;
        var script = document.createElement("script");
        script.textContent = code;
        document.head.appendChild(script);
        window.define = amd;
        if (typeof window.Plotly === "undefined") throw new Error("plotly.js ran but did not define window.Plotly");
      }).then(function () { settle(); }, settle);
    } catch (e) {
      settle(e); // a browser without DecompressionStream, for example
    }
  })();
}</script>
`;
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

/**
 * Draws once plotly.js is there. The element then records the outcome, which is what a page (or a
 * test) can wait for: `data-moelens-drawn` when `Plotly.newPlot` resolved, `data-moelens-failed`
 * with the reason otherwise. Without a library on the page, or one being loaded, it gives up after
 * 20 s and says why in place of the chart.
 */
function drawScript(id: string, spec: FigureSpec): string {
  return `<script type="text/javascript">
(function () {
  var fig = ${scriptJson(spec)};
  var waited = 0;
  function fail(el, reason) {
    el.setAttribute("data-moelens-failed", reason);
    el.textContent = reason;
  }
  function draw() {
    var el = document.getElementById(${JSON.stringify(id)});
    if (!el) return;
    if (window.Plotly) {
      Promise.resolve()
        .then(function () { return window.Plotly.newPlot(el, fig.data, fig.layout, fig.config); })
        .then(function () { el.setAttribute("data-moelens-drawn", ""); }, function (e) { fail(el, "plotly.js could not draw this figure: " + e); });
      return;
    }
    if (window.moelensPlotlyError) return fail(el, "plotly.js did not load: " + window.moelensPlotlyError);
    if (window.moelensPlotlyLoading || ++waited < 400) { setTimeout(draw, 50); return; }
    fail(el, "plotly.js did not load: the first figure of the notebook carries it. Re-run that cell, or call resendPlotlyLibrary() and re-run this one.");
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
