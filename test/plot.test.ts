// Plot builders: the numbers in each figure come from the trace they were built from, labels are
// escaped, and the HTML fallback draws with plotly.js (run here in a stub DOM; test/notebooks.test.ts
// draws for real in Chromium).
import * as fs from "node:fs";
import * as vm from "node:vm";
import * as zlib from "node:zlib";
import { beforeEach, describe, expect, test } from "vitest";
import {
  AttentionTrace,
  DeltaNetTrace,
  ExpertLoad,
  Figure,
  RouterTrace,
  Tensor,
  attentionMap,
  coOccurrenceCounts,
  deltanetGates,
  expertCoOccurrence,
  expertLoadHeatmap,
  logitLensTable,
  resendPlotlyLibrary,
  routingConsistency,
  stateNormCurves,
  tokenRouting,
  top1MutualInformation,
  type TokenSpan,
} from "moelens";

const f32 = (xs: number[]) => Float32Array.from(xs);

/** A router trace from top-k ids [layers][tokens][k]; weights and probabilities follow from the ids. */
function routerTrace(ids: number[][][], experts: number, span?: Partial<TokenSpan>): RouterTrace {
  const L = ids.length;
  const T = ids[0].length;
  const k = ids[0][0].length;
  const flat = ids.flat(2);
  const weights = flat.map((_, i) => (i % k === 0 ? 0.5 : 0.5 / (k - 1)));
  const probs = new Float32Array(L * T * experts);
  for (let l = 0; l < L; l++) for (let t = 0; t < T; t++) for (let s = 0; s < k; s++) probs[(l * T + t) * experts + ids[l][t][s]] = 1 / k;
  return new RouterTrace(
    new Tensor([L, T, k], Int32Array.from(flat)),
    new Tensor([L, T, k], f32(weights)),
    new Tensor([L, T, experts], probs.map((p) => Math.log(p + 1e-9))),
    new Tensor([L, T, experts], probs),
    new Tensor([L, T], new Float32Array(L * T).fill(0.25)),
    { ids: span?.ids ?? Int32Array.from({ length: T }, (_, t) => 100 + t), start: span?.start ?? 0 },
  );
}

const decoder = { decode: (ids: ArrayLike<number>) => Array.from(ids, (id) => (id === 0 ? "<|endoftext|>" : id === 1 ? "\n" : `t${id}`)).join("") };

describe("expert load heatmap", () => {
  // 2 layers, 3 tokens, top-2 of 4 experts
  const trace = routerTrace(
    [
      [[0, 1], [0, 2], [0, 1]],
      [[3, 2], [3, 2], [1, 0]],
    ],
    4,
  );
  const load = ExpertLoad.from([trace]);

  test("fraction: share of tokens that chose each expert, per layer", () => {
    const fig = expertLoadHeatmap(load);
    const z = fig.data[0].z as number[][];
    expect(z).toEqual([
      [1, 0.6667, 1 / 3, 0].map((v) => Number(v.toPrecision(4))),
      [1 / 3, 1 / 3, 0.6667, 0.6667].map((v) => Number(v.toPrecision(4))),
    ]);
    expect(fig.layout.title).toEqual({ text: "Expert load over 3 tokens (share of tokens; uniform routing: 0.500)" });
    expect(fig.data[0].x).toEqual([0, 1, 2, 3]);
    expect(fig.data[0].y).toEqual([0, 1]);
  });

  test("count and mean probability", () => {
    expect(expertLoadHeatmap(load, { metric: "count" }).data[0].z).toEqual([
      [3, 2, 1, 0],
      [1, 1, 2, 2],
    ]);
    const p = expertLoadHeatmap(load, { metric: "probability" }).data[0].z as number[][];
    expect(p[0]).toEqual([0.5, 0.3333, 0.1667, 0]);
    expect(() => expertLoadHeatmap(load, { metric: "share" as never })).toThrow(/unknown metric 'share'/);
  });
});

describe("per-token routing", () => {
  const trace = routerTrace(
    [
      [[5, 1], [2, 3], [7, 0]],
      [[6, 0], [6, 1], [4, 2]],
    ],
    8,
    { ids: Int32Array.from([0, 9, 1]), start: 4 },
  );

  test("each cell is the token's top-1 expert; positions are absolute, labels escaped", () => {
    const fig = tokenRouting(trace, { tokenizer: decoder });
    expect(fig.data[0].z).toEqual([
      [5, 2, 7],
      [6, 6, 4],
    ]);
    expect(fig.data[0].x).toEqual([4, 5, 6]);
    const axis = fig.layout.xaxis as { tickvals: number[]; ticktext: string[] };
    expect(axis.tickvals).toEqual([4, 5, 6]);
    expect(axis.ticktext).toEqual(["&lt;|endoftext|&gt;", "t9", "↵"]);
    expect((fig.data[0].customdata as string[][])[0][0]).toBe("5: 0.500<br>1: 0.500");
    // a discrete scale: one band per expert
    expect(fig.data[0].zmin).toBe(-0.5);
    expect(fig.data[0].zmax).toBe(7.5);
    expect((fig.data[0].colorscale as unknown[]).length).toBe(16);
  });

  test("top-1 is the largest weight, also when a forced expert holds slot 0", () => {
    const forced = new RouterTrace(
      new Tensor([1, 1, 3], Int32Array.from([6, 2, 4])),
      new Tensor([1, 1, 3], f32([0.01, 0.7, 0.29])),
      new Tensor([1, 1, 8], new Float32Array(8)),
      new Tensor([1, 1, 8], new Float32Array(8)),
      new Tensor([1, 1], f32([0.5])),
      { ids: Int32Array.from([3]), start: 0 },
    );
    const fig = tokenRouting(forced);
    expect(fig.data[0].z).toEqual([[2]]);
    expect((fig.data[0].customdata as string[][])[0][0]).toBe("2: 0.700<br>4: 0.290<br>6: 0.010");
  });

  test("chosen layers and bad options", () => {
    expect(tokenRouting(trace, { layers: [1] }).data[0].z).toEqual([[6, 6, 4]]);
    expect(() => tokenRouting(trace, { layers: [2] })).toThrow(/layer 2 is outside \[0, 2\)/);
    expect(() => tokenRouting(trace, { labels: ["a"] })).toThrow(/1 labels given for 3 tokens/);
    expect((tokenRouting(trace).layout.xaxis as { ticktext: string[] }).ticktext).toEqual(["4", "5", "6"]);
  });
});

describe("expert co-occurrence", () => {
  const trace = routerTrace([[[0, 1], [1, 0], [1, 2]]], 3);

  test("counts tokens that chose both experts; symmetric; the diagonal is each expert's count", () => {
    expect(coOccurrenceCounts(trace, 0)).toEqual([
      [2, 2, 0],
      [2, 3, 1],
      [0, 1, 1],
    ]);
    // over several calls the counts add up
    expect(coOccurrenceCounts([trace, trace], 0)[0][1]).toBe(4);
    const z = expertCoOccurrence(trace, 0).data[0].z as (number | null)[][];
    expect(z).toEqual([
      [null, 2, 0],
      [2, null, 1],
      [0, 1, null],
    ]);
    expect(() => coOccurrenceCounts(trace, 1)).toThrow(/layer 1 is outside/);
  });
});

describe("routing consistency across layers", () => {
  test("normalised mutual information of top-1 experts: 1 when determined, 0 when independent", () => {
    const top1 = [
      [0, 0, 1, 1, 2, 2, 3, 3], // layer 0
      [4, 4, 5, 5, 6, 6, 7, 7], // a relabelling of layer 0
      [0, 1, 0, 1, 0, 1, 0, 1], // independent of layer 0
      [3, 3, 3, 3, 3, 3, 3, 3], // always the same expert
    ];
    const trace = routerTrace(top1.map((row) => row.map((e) => [e, (e + 1) % 8])), 8);
    const nmi = top1MutualInformation(trace);
    expect(nmi[0][1]).toBeCloseTo(1, 12);
    expect(nmi[1][0]).toBeCloseTo(1, 12);
    expect(nmi[0][2]).toBeCloseTo(0, 12);
    expect(nmi[0][3]).toBe(0);
    expect(nmi[3][3]).toBe(1);
    // Partly determined: the parity of layer 0's expert.
    const parity = routerTrace([top1[0].map((e) => [e, 7]), top1[0].map((e) => [e % 2, 7])], 8);
    // H(parity)=log2, H(layer0)=log4, I=log2 -> NMI = log2 / sqrt(log2 * log4) = 1/sqrt(2)
    expect(top1MutualInformation(parity)[0][1]).toBeCloseTo(Math.SQRT1_2, 12);
    const fig = routingConsistency(trace);
    expect((fig.data[0].z as number[][])[0][1]).toBe(1);
    expect(fig.layout.title?.text).toContain("8 tokens");
  });
});

describe("DeltaNet plots", () => {
  // DeltaNet layers 0 and 2 of the model, 3 tokens, 2 heads
  const values = (base: number) => new Tensor([2, 3, 2], f32([...Array(12).keys()].map((i) => base + i / 100)));
  const trace = new DeltaNetTrace([0, 2], values(0.1), values(0.5), values(1), { ids: Int32Array.from([7, 8, 9]), start: 0 });

  test("decay (top) and beta (bottom) of each head over tokens", () => {
    const fig = deltanetGates(trace, 2);
    // layer index 1 (model layer 2): values 6..11 hundredths; head 1 = odd offsets
    const decayHead1 = fig.data.find((d) => d.name === "head 1" && d.yaxis === "y")!;
    const betaHead1 = fig.data.find((d) => d.name === "head 1" && d.yaxis === "y2")!;
    expect(decayHead1.y).toEqual([0.57, 0.59, 0.61]);
    expect(betaHead1.y).toEqual([0.17, 0.19, 0.21]);
    expect(betaHead1.showlegend).toBe(false);
    expect(fig.data).toHaveLength(4);
    expect(() => deltanetGates(trace, 1)).toThrow(/layer 1 is not a DeltaNet layer \(0, 2\)/);
  });

  test("state norm: mean over heads per layer, or each head of one layer", () => {
    const perLayer = stateNormCurves(trace);
    expect(perLayer.data.map((d) => d.name)).toEqual(["layer 0", "layer 2"]);
    expect(perLayer.data[0].y).toEqual([1.005, 1.025, 1.045]);
    const perHead = stateNormCurves(trace, { layer: 0 });
    expect(perHead.data.map((d) => d.y)).toEqual([
      [1, 1.02, 1.04],
      [1.01, 1.03, 1.05],
    ]);
  });
});

describe("attention map", () => {
  // a decode-like call: 2 queries at positions 1 and 2 over keys 0..2
  // [layer][head][query][key]; query 0 (position 1) cannot see key 2
  const weights = new Tensor([1, 2, 2, 3], f32([0.6, 0.4, 0, 0.2, 0.5, 0.3, 0.3, 0.7, 0.9, 0, 0.2, 0.8]));
  const trace = new AttentionTrace([3], [0, 1], weights, { ids: Int32Array.from([4, 5]), start: 1 });

  test("queries over the keys they can see; later keys blank", () => {
    const fig = attentionMap(trace, 3, 1);
    expect(fig.data[0].y).toEqual([1, 2]);
    expect(fig.data[0].x).toEqual([0, 1, 2]);
    // head 1: query at position 1 sees keys 0..1, query at position 2 sees 0..2
    // the 0.9 under the mask (a stale value) is not shown
    expect(fig.data[0].z).toEqual([
      [0.3, 0.7, null],
      [0, 0.2, 0.8],
    ]);
    const labelled = attentionMap(trace, 3, 0, { tokenizer: decoder });
    expect((labelled.layout.xaxis as { ticktext: string[] }).ticktext).toEqual(["0", "t4", "t5"]);
    expect(() => attentionMap(trace, 7, 0)).toThrow(/layer 7 was not captured \(captured: 3\)/);
    expect(() => attentionMap(trace, 3, 2)).toThrow(/head 2 was not captured/);
  });
});

describe("logit lens table", () => {
  test("top-1 token as text, its logit as color, top-k on hover", () => {
    const rows = [
      { layer: 0, position: 5, ids: [0, 3], logits: [2.5, 1] },
      { layer: 0, position: 6, ids: [4, 3], logits: [3, 2] },
      { layer: 1, position: 5, ids: [3, 0], logits: [7.25, 1] },
      { layer: 1, position: 6, ids: [1, 0], logits: [9, 1] },
    ];
    const fig = logitLensTable(rows, { tokenizer: decoder, labels: ["a", "b"] });
    expect(fig.data[0].z).toEqual([
      [2.5, 3],
      [7.25, 9],
    ]);
    // Long tokens are cut in their cell (so that neighbours cannot overlap), whole on hover.
    expect(fig.data[0].text).toEqual([
      ["&lt;|end…", "t4"],
      ["t3", "↵"],
    ]);
    expect((fig.data[0].customdata as string[][])[1][0]).toBe("t3 (7.25)<br>&lt;|endoftext|&gt; (1.00)");
    expect((fig.data[0].customdata as string[][])[0][0]).toBe("&lt;|endoftext|&gt; (2.50)<br>t3 (1.00)");
    expect(fig.data[0].y).toEqual([0, 1]);
    expect(fig.data[0].x).toEqual([5, 6]);
    expect(() => logitLensTable([])).toThrow(/no lens rows/);
  });
});

describe("Figure display", () => {
  beforeEach(() => resendPlotlyLibrary());
  const figure = () => new Figure([{ type: "bar", y: [1, 2, 3] }], { title: { text: "bars </script><b>" } });

  test("the Plotly JSON bundle, and plotly.js in the first figure's HTML only", () => {
    const first = figure().toMimeBundle();
    const second = figure().toMimeBundle();
    expect(first["application/vnd.plotly.v1+json"]).toEqual({
      data: [{ type: "bar", y: [1, 2, 3] }],
      layout: { title: { text: "bars </script><b>" } },
      config: { responsive: true, displaylogo: false },
    });
    const html1 = first["text/html"] as string;
    const html2 = second["text/html"] as string;
    // plotly.min.js gzipped and in base64: about 2 MB.
    expect(html1.length).toBeGreaterThan(1_500_000);
    expect(html1.length).toBeLessThan(2_500_000);
    expect(html1).toContain('if (typeof window.Plotly === "undefined" && !window.moelensPlotlyLoading)');
    expect(html1).toContain("plotly.js v4.1.1");
    expect(html2.length).toBeLessThan(5_000);
    expect(html2).not.toContain("plotly.js v4.1.1");
    // Data can never close the script element early.
    expect(html2.match(/<\/script>/g)).toHaveLength(1);
    expect(first["text/plain"]).toBe('<Figure "bars </script><b>": bar>');
    resendPlotlyLibrary();
    expect(figure().toMimeBundle()["text/html"] as string).toContain("plotly.js v4.1.1");
  });

  /** The fallback script of a figure shown after the library, run against a stub page. */
  function stubPage(newPlot?: (...args: unknown[]) => unknown) {
    figure().toMimeBundle(); // ships the library
    const fig = figure();
    const html = fig.toMimeBundle()["text/html"] as string;
    const id = /<div id="([^"]+)"/.exec(html)![1];
    const script = /<script type="text\/javascript">([\s\S]*)<\/script>/.exec(html)![1];
    const attributes = new Map<string, string>();
    const element = { id, textContent: "", setAttribute: (name: string, value: string) => attributes.set(name, value) };
    const calls: unknown[][] = [];
    const window: { Plotly?: { newPlot(...args: unknown[]): unknown }; moelensPlotlyLoading?: boolean; moelensPlotlyError?: string } = {};
    let polls = 0;
    const plotly = { newPlot: (...args: unknown[]) => (calls.push(args), newPlot?.(...args)) };
    const context = vm.createContext({
      window,
      Promise,
      document: { getElementById: (x: string) => (x === id ? element : null) },
      setTimeout: (f: () => void) => (polls++, setTimeout(f, 0)),
    });
    const settled = () => attributes.has("data-moelens-drawn") || attributes.has("data-moelens-failed");
    const until = async (done: () => boolean) => {
      for (let i = 0; i < 5000 && !done(); i++) await new Promise((r) => setTimeout(r, 1));
    };
    return { fig, html, id, element, attributes, calls, window, plotly, settled, until, polls: () => polls, run: () => vm.runInContext(script, context) };
  }

  test("the fallback script draws the figure into its own element once Plotly is there, then marks it drawn", async () => {
    const page = stubPage(async () => undefined);
    const again = page.fig.toMimeBundle()["text/html"] as string;
    expect(again).not.toContain(page.id); // shown twice: two elements
    page.run();
    await new Promise((r) => setTimeout(r, 20));
    expect(page.calls).toHaveLength(0); // plotly.js not loaded yet: it waits
    expect(page.settled()).toBe(false);
    page.window.Plotly = page.plotly;
    await page.until(page.settled);
    expect(page.calls).toHaveLength(1);
    expect(page.calls[0][0]).toBe(page.element);
    expect(page.calls[0][1]).toEqual(page.fig.data);
    expect(page.calls[0][2]).toEqual(page.fig.layout);
    expect([...page.attributes]).toEqual([["data-moelens-drawn", ""]]);
  });

  test("a figure Plotly cannot draw is marked failed, with the reason", async () => {
    const page = stubPage(() => Promise.reject(new Error("bad trace")));
    page.window.Plotly = page.plotly;
    page.run();
    await page.until(page.settled);
    expect([...page.attributes]).toEqual([["data-moelens-failed", "plotly.js could not draw this figure: Error: bad trace"]]);
    expect(page.element.textContent).toContain("bad trace");
  });

  test("figures wait as long as the library is being loaded, and give up only when nothing loads it", async () => {
    const loading = stubPage(async () => undefined);
    loading.window.moelensPlotlyLoading = true;
    loading.run();
    // 400 polls is where a page without a loading library gives up; this one keeps waiting.
    await loading.until(() => loading.polls() > 1000);
    expect(loading.polls()).toBeGreaterThan(1000);
    expect(loading.settled()).toBe(false);
    loading.window.Plotly = loading.plotly;
    loading.window.moelensPlotlyLoading = false;
    await loading.until(loading.settled);
    expect(loading.attributes.has("data-moelens-drawn")).toBe(true);

    const absent = stubPage();
    absent.run();
    await absent.until(absent.settled);
    expect(absent.attributes.get("data-moelens-failed")).toMatch(/^plotly\.js did not load: the first figure of the notebook carries it/);

    const broken = stubPage();
    broken.window.moelensPlotlyError = "TypeError: DecompressionStream is not defined";
    broken.run();
    await broken.until(broken.settled);
    expect(broken.attributes.get("data-moelens-failed")).toBe("plotly.js did not load: TypeError: DecompressionStream is not defined");
  });

  test("a page that cannot inflate the library records why, so that its figures stop waiting", async () => {
    const html = figure().toMimeBundle()["text/html"] as string;
    const loader = /^<script type="text\/javascript">([\s\S]*?)<\/script>/.exec(html)![1];
    // No DecompressionStream here: the loader fails at once.
    const window: { moelensPlotlyLoading?: boolean; moelensPlotlyError?: string } = {};
    vm.runInContext(loader, vm.createContext({ window, atob, Uint8Array, Blob }));
    expect(window.moelensPlotlyLoading).toBe(false);
    expect(window.moelensPlotlyError).toMatch(/DecompressionStream is not defined/);
    // Bytes that are not gzip: the failure comes later, from the stream.
    const broken: typeof window = {};
    const garbage = loader.replace(/var packed = "[^"]*";/, `var packed = "${Buffer.from("not gzip").toString("base64")}";`);
    vm.runInContext(garbage, vm.createContext({ window: broken, atob, Uint8Array, Blob, DecompressionStream, Response }));
    expect(broken.moelensPlotlyLoading).toBe(true);
    for (let i = 0; i < 500 && broken.moelensPlotlyLoading; i++) await new Promise((r) => setTimeout(r, 2));
    expect(broken.moelensPlotlyLoading).toBe(false);
    expect(broken.moelensPlotlyError).toMatch(/^\w*Error: ./); // the stream's own words: "incorrect header check" in Node
  });

  test("the first figure's library is plotly.min.js, byte for byte, once inflated", () => {
    const html = figure().toMimeBundle()["text/html"] as string;
    const packed = /var packed = "([A-Za-z0-9+/=]+)";/.exec(html)![1];
    const file = require.resolve("plotly.js-dist-min/plotly.min.js");
    expect(zlib.gunzipSync(Buffer.from(packed, "base64")).equals(fs.readFileSync(file))).toBe(true);
    // The base64 text cannot end the script element early.
    expect(html.match(/<\/script>/g)).toHaveLength(2);
  });

  test("toHTML is a standalone page with the library", () => {
    const page = figure().toHTML();
    expect(page.startsWith("<!DOCTYPE html>")).toBe(true);
    expect(page).toContain("<title>bars &lt;/script&gt;&lt;b&gt;</title>");
    expect(page).toContain("plotly.js v4.1.1");
  });
});
