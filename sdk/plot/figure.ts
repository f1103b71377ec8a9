// A Plotly figure as plain JSON ({data, layout, config}) that renders itself in notebooks: Plotly's own
// MIME type for frontends that have a Plotly renderer, plus an HTML fallback that draws offline.
import type { FigureSpec, PlotlyLayout, PlotlyTrace } from "./figure-spec";
import { figureHtml, standalonePage } from "./plotly-html";

export class Figure implements FigureSpec {
  data: PlotlyTrace[];
  layout: PlotlyLayout;
  config: Record<string, unknown>;

  constructor(data: PlotlyTrace[], layout: PlotlyLayout = {}, config: Record<string, unknown> = {}) {
    this.data = data;
    this.layout = layout;
    this.config = { responsive: true, displaylogo: false, ...config };
  }

  /** The plain spec, for Plotly.newPlot, plotly.py (`go.Figure(spec)`) or a JSON file. */
  toJSON(): FigureSpec {
    return { data: this.data, layout: this.layout, config: this.config };
  }

  /** A self-contained HTML page (plotly.js inlined, no network) that draws the figure. */
  toHTML(): string {
    return standalonePage(this.toJSON(), this.layout.title?.text ?? "moelens figure");
  }

  /**
   * The Jupyter display: `application/vnd.plotly.v1+json` (JupyterLab with jupyterlab-plotly, VS
   * Code) and `text/html` (everything else, nbconvert's HTML export). The first figure of the process
   * carries plotly.js in its HTML; later ones reuse it.
   */
  toMimeBundle(): Record<string, unknown> {
    const spec = this.toJSON();
    return {
      "application/vnd.plotly.v1+json": spec,
      "text/html": figureHtml(spec),
      "text/plain": `<Figure ${JSON.stringify(this.layout.title?.text ?? "")}: ${this.data.map((t) => t.type).join(", ")}>`,
    };
  }
}
