// A Plotly figure as plain JSON ({data, layout, config}): what Figure holds and plotly.js draws.

/** One Plotly trace ({type: "heatmap", z, ...}); see https://plotly.com/javascript/reference/. */
export type PlotlyTrace = { type: string; [key: string]: unknown };

/** Plotly layout; titles are objects ({title: {text}}): plotly.js 4 ignores string titles. */
export type PlotlyLayout = { title?: { text: string }; [key: string]: unknown };

export interface FigureSpec {
  data: PlotlyTrace[];
  layout: PlotlyLayout;
  config?: Record<string, unknown>;
}
