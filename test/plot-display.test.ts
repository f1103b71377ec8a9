// Rich display of SDK objects (toMimeBundle) and the live outputs: a token stream and a progress bar
// update one display through the kernel bridge, coalesced to one update per interval, and do nothing
// without a kernel. The bundles are checked through the kernel's own validation (kernel/mime.ts).
import { afterEach, describe, expect, test } from "vitest";
import { toMimeBundle } from "../kernel/mime";
import {
  ExpertLoad,
  LogitLensTable,
  ProgressBar,
  RouterTrace,
  Tensor,
  TokenStream,
  expertBackground,
  resendPlotlyLibrary,
  type TokenDecoder,
} from "moelens";

const BRIDGE = Symbol.for("moelens.kernel");
type Sent = { kind: "display" | "update"; displayId?: string; bundle: Record<string, unknown> };

/** A stand-in for the kernel: records what would be sent, with the bundle as the kernel computes it then. */
function fakeKernel(): Sent[] {
  const sent: Sent[] = [];
  (globalThis as Record<symbol, unknown>)[BRIDGE] = {
    display: (value: unknown, o?: { displayId?: string }) => sent.push({ kind: "display", displayId: o?.displayId, bundle: toMimeBundle(value) }),
    updateDisplay: (value: unknown, o: { displayId: string }) => sent.push({ kind: "update", displayId: o.displayId, bundle: toMimeBundle(value) }),
  };
  return sent;
}

afterEach(() => {
  delete (globalThis as Record<symbol, unknown>)[BRIDGE];
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function router(top1PerLayer: number[], tokenizer?: TokenDecoder): RouterTrace {
  const L = top1PerLayer.length;
  const ids = Int32Array.from(top1PerLayer.flatMap((e) => [e, (e + 1) % 8]));
  return new RouterTrace(
    new Tensor([L, 1, 2], ids),
    new Tensor([L, 1, 2], new Float32Array(L * 2).fill(0.5)),
    new Tensor([L, 1, 8], new Float32Array(L * 8)),
    new Tensor([L, 1, 8], new Float32Array(L * 8).fill(1 / 8)),
    new Tensor([L, 1], new Float32Array(L).fill(0.5)),
    { ids: Int32Array.from([42]), start: 9, tokenizer },
  );
}

describe("Tensor", () => {
  test("dtype, shape and every value of a small tensor", () => {
    const b = toMimeBundle(new Tensor([2, 3], Float32Array.from([1, -2.5, 0.125, 3e-5, 123456, 0])));
    expect(b["text/plain"]).toBe("Tensor float32 [2, 3]\n[[1.0000, -2.5000, 0.1250],\n [3.000e-5, 1.235e+5, 0.0000]]");
    expect(b["text/html"]).toContain("min -2.5000 · max 1.235e+5");
  });

  test("an empty tensor (logits: \"none\")", () => {
    const b = toMimeBundle(new Tensor([0, 8], new Float32Array(0)));
    expect(b["text/plain"]).toBe("Tensor float32 [0, 8]\n[]");
    expect(b["text/html"]).toContain("0 elements · empty");
  });

  test("a large tensor shows the edges of each axis", () => {
    const t = new Tensor([4, 10, 50], Int32Array.from({ length: 2000 }, (_, i) => i));
    const text = toMimeBundle(t)["text/plain"] as string;
    const lines = text.split("\n");
    expect(lines[0]).toBe("Tensor int32 [4, 10, 50]");
    expect(lines[1]).toBe("[[[0, 1, 2, ..., 47, 48, 49],");
    expect(lines.slice(4, 10)).toEqual([
      "  ...,",
      "  [350, 351, 352, ..., 397, 398, 399],",
      "  [400, 401, 402, ..., 447, 448, 449],",
      "  [450, 451, 452, ..., 497, 498, 499]],",
      "",
      " [[500, 501, 502, ..., 547, 548, 549],",
    ]);
    expect(text.endsWith("[1950, 1951, 1952, ..., 1997, 1998, 1999]]]")).toBe(true);
    expect(lines).toHaveLength(1 + 4 * 7 + 3); // 4 blocks of 7 rows, blank lines between
  });
});

describe("traces", () => {
  test("RouterTrace: the top-1 expert per layer and token, top-k on hover", () => {
    const b = toMimeBundle(router([3, 5]));
    expect(b["text/plain"]).toBe("RouterTrace: 2 layers × 1 tokens, top-2 of 8 experts, positions 9..9\nlayer 0: top-1 3\nlayer 1: top-1 5");
    const html = b["text/html"] as string;
    expect(html).toContain(`title="expert 5: 0.500&#10;expert 6: 0.500"`.replace("&#10;", "\n"));
    expect(html).toContain(`background: ${expertBackground(3)};">3</span>`);
    expect(html).toContain('<th style="text-align: right; padding: 2px 6px;">9<br><span style="color: #888;">42</span></th>');
    expect(html).toContain("header: position and token id");
  });

  test("RouterTrace: columns named by the token's text when the trace knows its tokenizer, the id on hover", () => {
    const html = toMimeBundle(router([3, 5], { decode: (ids) => (ids[0] === 42 ? " <b>\n" : "?") }))["text/html"] as string;
    expect(html).toContain('9<br><span title="token 42" style="color: #888; white-space: pre;"> &lt;b&gt;↵</span>');
    expect(html).toContain("header: position and token text");
  });

  test("ExpertLoad: balance per layer beside the heatmap", () => {
    resendPlotlyLibrary();
    const load = ExpertLoad.from([router([3, 5]), router([3, 6])]);
    const b = toMimeBundle(load);
    const plain = (b["text/plain"] as string).split("\n");
    expect(plain[0]).toContain("ExpertLoad: 2 tokens, 2 layers, top-2 of 8 experts");
    // layer 0: experts 3 and 4 both chose twice -> entropy log 2 of log 8; busiest 3 with share 1
    expect(plain[2]).toBe("    0         0.333  1.732        3  1.000       6");
    expect(b["application/vnd.plotly.v1+json"]).toMatchObject({ data: [{ type: "heatmap" }] });
    const html = b["text/html"] as string;
    expect(html.indexOf("<table")).toBeLessThan(html.indexOf("moelens-figure-"));
  });

  test("LogitLensTable: the top token per layer and position", () => {
    const tokenizer = { decode: (ids: ArrayLike<number>) => (ids[0] === 1 ? "<b>" : ` w${ids[0]}`) };
    const table = new LogitLensTable(
      [
        { layer: 0, position: 0, ids: [1, 2], logits: [3, 2] },
        { layer: 3, position: 0, ids: [2, 1], logits: [5, 4] },
      ],
      tokenizer,
      ["The"],
    );
    const b = toMimeBundle(table);
    expect(b["text/plain"]).toBe('logit lens: top-1 token per layer (rows) and position (columns 0)\nlayer 0: "<b>"\nlayer 3: " w2"');
    expect(b["text/html"]).toContain("&lt;b&gt;");
    expect(b["text/html"]).not.toContain("<b>");
    expect(() => new LogitLensTable([])).toThrow(/no lens rows/);
  });
});

describe("token stream", () => {
  test("one display, updated at most once per interval, ending with all the text", async () => {
    const sent = fakeKernel();
    const stream = new TokenStream({ intervalMs: 30 });
    for (let i = 0; i < 1000; i++) stream.push({ text: `t${i} `, tokens: [i] });
    // synchronous pushes: the first shows, the rest wait for the interval
    expect(sent.map((s) => s.kind)).toEqual(["display"]);
    await sleep(80);
    expect(sent.map((s) => s.kind)).toEqual(["display", "update"]);
    const all = Array.from({ length: 1000 }, (_, i) => `t${i} `).join("");
    expect(sent[1].bundle["text/plain"]).toBe(all);
    expect(new Set(sent.map((s) => s.displayId))).toEqual(new Set([stream.displayId]));
    // the last piece (with a finish reason) is shown at once
    stream.push({ text: "end", tokens: [1], finishReason: "length" });
    expect(sent).toHaveLength(3);
    expect(sent[2].bundle["text/plain"]).toBe(`${all}end`);
    expect(sent[2].bundle["text/html"]).toContain("1001 tokens");
    expect(sent[2].bundle["text/html"]).toContain("length");
  });

  test("pieces paced like decoding: a bounded number of updates", async () => {
    const sent = fakeKernel();
    const stream = new TokenStream();
    for (let i = 0; i < 40; i++) {
      stream.push(`w${i} `);
      await sleep(2);
    }
    stream.end();
    // 40 pieces over >= 80 ms: far fewer updates than pieces, and the last state is complete
    expect(sent.length).toBeLessThan(15);
    expect(sent.at(-1)!.bundle["text/plain"]).toBe(Array.from({ length: 40 }, (_, i) => `w${i} `).join(""));
  });

  test("colored by the top-1 expert of the chosen layer", () => {
    const sent = fakeKernel();
    const stream = new TokenStream({ colorBy: "expert", layer: 1 });
    stream.push({ text: "a<b", router: router([3, 5]) });
    stream.push({ text: "c", router: router([3, 7]), finishReason: "eos" });
    const html = sent.at(-1)!.bundle["text/html"] as string;
    expect(html).toContain(`<span style="background: ${expertBackground(5)}; border-radius: 2px;" title="expert 5">a&lt;b</span>`);
    expect(html).toContain(`title="expert 7">c</span>`);
    expect(() => new TokenStream({ colorBy: "rainbow" as never })).toThrow(/colorBy must be "plain" or "expert"/);
    expect(() => new TokenStream({ colorBy: "expert", layer: 4 }).push({ text: "x", router: router([1]) })).toThrow(/layer 4 is outside \[0, 1\)/);
  });

  test("without a kernel it only collects the text", async () => {
    const stream = new TokenStream();
    stream.push("a");
    stream.push({ text: "b", finishReason: "stop" });
    stream.end();
    expect(stream.text).toBe("ab");
  });
});

describe("progress bar", () => {
  test("updates in place and shows completion at once", () => {
    const sent = fakeKernel();
    const bar = new ProgressBar("Loading");
    const onProgress = bar.update; // passed as a callback
    for (let i = 1; i <= 8; i++) onProgress(i, 9);
    expect(sent).toHaveLength(1);
    onProgress(9, 9);
    expect(sent.map((s) => s.kind)).toEqual(["display", "update"]);
    expect(sent[1].bundle["text/plain"]).toMatch(/^Loading \[#{30}\] 100% 9\/9 · \d+\.\d\d s$/);
    expect(sent[0].bundle["text/plain"]).toBe(`Loading [###${" ".repeat(27)}] 11% 1/9`);
    expect(() => onProgress(-1)).toThrow(/progress -1\/9/);
  });
});
