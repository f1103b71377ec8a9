// How an ExpertLoad shows itself: balance statistics per layer beside the layer x expert heatmap.
import { expertLoadHeatmap } from "../plot/expert-load";
import { ExpertLoad } from "../trace/expert-load";
import { htmlTable } from "./html";
import { registerView } from "./views";

interface LayerBalance {
  layer: number;
  /** entropy / log(E): 1 is perfectly balanced */
  normalizedEntropy: number;
  cv: number;
  maxShare: number;
  busiest: number;
  unused: number;
}

function balance(load: ExpertLoad): LayerBalance[] {
  return Array.from({ length: load.layers }, (_, layer) => {
    const share = load.fraction(layer);
    let busiest = 0;
    for (let e = 1; e < share.length; e++) if (share[e] > share[busiest]) busiest = e;
    return {
      layer,
      normalizedEntropy: load.entropy(layer) / Math.log(load.experts),
      cv: load.coefficientOfVariation(layer),
      maxShare: share[busiest] ?? 0,
      busiest,
      unused: share.filter((s) => s === 0).length,
    };
  });
}

function expertLoadMimeBundle(load: ExpertLoad): Record<string, unknown> {
  const rows = balance(load);
  const summary = `ExpertLoad: ${load.tokens} tokens, ${load.layers} layers, top-${load.k} of ${load.experts} experts (uniform share ${(load.k / load.experts).toFixed(3)}); aux loss ${load.auxLoss().toFixed(3)} (${load.k} when perfectly balanced)`;
  const table = htmlTable(
    ["layer", "entropy / log E", "CV", "busiest expert", "its share", "unused experts"],
    rows.map((r) => [String(r.layer), r.normalizedEntropy.toFixed(3), r.cv.toFixed(3), String(r.busiest), r.maxShare.toFixed(3), String(r.unused)]),
    summary,
  );
  const figure = expertLoadHeatmap(load).toMimeBundle();
  const text = [
    summary,
    "layer  entropy/logE  CV     busiest  share  unused",
    ...rows.map((r) => `${String(r.layer).padStart(5)}  ${r.normalizedEntropy.toFixed(3).padStart(12)}  ${r.cv.toFixed(3).padStart(5)}  ${String(r.busiest).padStart(7)}  ${r.maxShare.toFixed(3)}  ${String(r.unused).padStart(6)}`),
  ];
  return {
    "application/vnd.plotly.v1+json": figure["application/vnd.plotly.v1+json"],
    "text/html": `${table}\n${figure["text/html"] as string}`,
    "text/plain": text.join("\n"),
  };
}

registerView(ExpertLoad, expertLoadMimeBundle);
