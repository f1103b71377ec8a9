// Plot builders: pure functions from traces to Plotly figures (JSON specs that also render in notebooks).
export { Figure } from "./figure";
export type { FigureSpec, PlotlyTrace, PlotlyLayout } from "./figure-spec";
export { resendPlotlyLibrary } from "./plotly-html";
export { expertLoadHeatmap, type ExpertLoadHeatmapOptions, type LoadMetric } from "./expert-load";
export { tokenRouting, type TokenRoutingOptions } from "./token-routing";
export { expertCoOccurrence, coOccurrenceCounts, type CoOccurrenceOptions } from "./co-occurrence";
export { routingConsistency, top1MutualInformation, type RoutingConsistencyOptions } from "./routing-consistency";
export { deltanetGates, stateNormCurves, type DeltaNetPlotOptions } from "./deltanet";
export { attentionMap, type AttentionMapOptions } from "./attention";
export { logitLensTable, type LogitLensTableOptions } from "./logit-lens";
export { tokenEntropy, type TokenEntropyOptions } from "./token-entropy";
export { compareLogits, compareRouting, type CompareOptions } from "./compare";
export { tokenLabels, visibleToken, type TokenDecoder } from "./labels";
export { expertColor, expertBackground, seriesColor } from "./colors";
