// Traces joined and exported: a prefill and its decode steps concatenated equal one prefill of the
// same tokens; generate() hands out per-token router traces that join the same way; every Arrow
// export that knows its tokens carries their text.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AttentionTrace, concatResults, DeltaNetTrace, load, residualToArrow, RouterTrace, Tensor, TokenStream, type ForwardOptions, type ForwardResult, type Model } from "moelens";

let model: Model;
let ids: number[];
const capture: ForwardOptions["capture"] = ["router", "residual", "deltanet", "attention-gate"];

beforeAll(async () => {
  model = await load(undefined, { threads: 1 });
  ids = model.tokenizer!.encode("The jury said that the city of 😀 was quiet");
});
afterAll(() => model?.tokenizer?.close());

function expectClose(a: Tensor, b: Tensor, tolerance: number): void {
  expect(a.shape).toEqual(b.shape);
  let worst = 0;
  for (let i = 0; i < a.size; i++) worst = Math.max(worst, Math.abs(a.data[i] - b.data[i]));
  expect(worst).toBeLessThan(tolerance);
}

describe("joining traces", () => {
  it("a prefill and its decode steps, concatenated, equal one prefill of the same tokens", async () => {
    const attention = { layers: [3, 7] };
    const whole = await model.session().prefill(ids, { logits: "all", capture, attention });
    const s = model.session();
    const parts: ForwardResult[] = [await s.prefill(ids.slice(0, 6), { logits: "all", capture, attention })];
    for (const id of ids.slice(6)) parts.push(await s.decode(id, { capture, attention }));
    const joined = concatResults(parts);

    expect(joined.tokens).toBe(ids.length);
    expect(joined.span.start).toBe(0);
    expect(Array.from(joined.span.ids)).toEqual(ids);
    expect(Array.from(joined.router!.ids.data)).toEqual(Array.from(whole.router!.ids.data));
    expectClose(joined.router!.weights, whole.router!.weights, 1e-5);
    expectClose(joined.router!.probs, whole.router!.probs, 1e-5);
    expectClose(joined.router!.sharedGate, whole.router!.sharedGate, 1e-5);
    expectClose(joined.residual!, whole.residual!, 1e-3);
    expectClose(joined.deltanet!.stateNorm, whole.deltanet!.stateNorm, 1e-3);
    expectClose(joined.attentionGate!.values, whole.attentionGate!.values, 1e-5);
    expect(joined.attention!.weights.shape).toEqual(whole.attention!.weights.shape);
    expectClose(joined.attention!.weights, whole.attention!.weights, 1e-5);
    // logits: the prefill's 6 rows, then one per decode step
    expectClose(joined.logits, whole.logits, 1e-3);
    // the static concat of each trace type agrees with concatResults
    expect(RouterTrace.concat(parts.map((p) => p.router!)).ids.data).toEqual(joined.router!.ids.data);
    expect(DeltaNetTrace.concat(parts.map((p) => p.deltanet!)).beta.data).toEqual(joined.deltanet!.beta.data);
    expect(AttentionTrace.concat(parts.map((p) => p.attention!)).weights.data).toEqual(joined.attention!.weights.data);
  });

  it("refuses traces whose positions are not continuous, or of other shapes", async () => {
    const s = model.session();
    const a = await s.prefill(ids.slice(0, 3), { capture: ["router"] });
    const b = await s.decode(ids[3], { capture: ["router"] });
    expect(() => RouterTrace.concat([b.router!, a.router!])).toThrow(/RouterTrace\.concat: trace 1 starts at position 0, but the one before it ends at 4 \(positions must be continuous\)/);
    expect(() => RouterTrace.concat([])).toThrow(/no traces to concatenate/);
    const other = await model.session().prefill(ids.slice(0, 4), { attention: { layers: [3] } });
    const next = await s.decode(ids[4], { attention: { layers: [7] } });
    expect(() => AttentionTrace.concat([other.attention!, next.attention!])).toThrow(/trace 1 covers layers \[7\]/);
    // A capture only some calls recorded is left out, the rest still joins.
    const joined = concatResults([a, b, next]);
    expect(joined.router).toBeUndefined();
    expect(joined.tokens).toBe(5);
  });

  it("generate() with capture router: each chunk carries its token's routing, and they join with the prompt's", async () => {
    const prompt = "The jury said";
    const s = model.session();
    const chunks = [];
    for await (const c of s.generate(prompt, { maxTokens: 8, temperature: 0, capture: ["router"], stopTokenIds: [] })) chunks.push(c);
    expect(chunks[0].promptRouter).toBeDefined();
    expect(chunks.slice(1).every((c) => c.promptRouter === undefined)).toBe(true);
    const steps = chunks.filter((c) => c.router);
    expect(steps).toHaveLength(8);
    for (const c of steps) expect(Array.from(c.router!.span.ids)).toEqual(c.tokens);
    const joined = RouterTrace.concat([chunks[0].promptRouter!, ...steps.map((c) => c.router!)]);
    const promptIds = model.tokenizer!.encode(prompt);
    const all = [...promptIds, ...steps.flatMap((c) => c.tokens)];
    expect(Array.from(joined.span.ids)).toEqual(all);
    expect(s.position).toBe(all.length);
    const direct = await model.session().prefill(all, { capture: ["router"] });
    expect(Array.from(joined.ids.data)).toEqual(Array.from(direct.router!.ids.data));
    // The chunks color a token stream as they are.
    const stream = new TokenStream({ colorBy: "expert" });
    for (const c of chunks) stream.push(c);
    const html = String(stream.toMimeBundle()["text/html"]);
    expect(html.match(/title="expert \d+"/g)?.length).toBe(steps.filter((c) => c.text !== "").length);
    // Without the capture option, chunks carry no traces.
    for await (const c of model.session().generate(prompt, { maxTokens: 2 })) expect(c.router ?? c.promptRouter).toBeUndefined();
  });
});

describe("token text in Arrow exports", () => {
  it("router, router probabilities, DeltaNet, attention and residual exports carry each token's text", async () => {
    const tok = model.tokenizer!;
    const r = await model.session().prefill(ids, { capture: ["router", "residual", "deltanet"], attention: { layers: [3] } });
    const text = (id: number) => tok.decode([id]);
    const check = (table: ReturnType<RouterTrace["toArrow"]>, tokenColumn: string, textColumn: string) => {
      const tokens = table.getChild(tokenColumn)!.toArray() as Int32Array;
      const texts = table.getChild(textColumn)!.toArray() as string[];
      expect(texts).toHaveLength(table.numRows);
      for (let i = 0; i < table.numRows; i += 7) expect(texts[i]).toBe(text(tokens[i]));
      return texts;
    };
    const router = r.router!.toArrow();
    expect(router.schema.fields.map((f) => f.name)).toEqual(["token", "token_text", "position", "layer", "slot", "expert", "weight"]);
    const texts = check(router, "token", "token_text");
    // the emoji's bytes span tokens that decode alone to replacement characters; whole tokens decode to their text
    expect(texts).toContain(" jury");
    check(r.router!.probsToArrow(), "token", "token_text");
    check(r.deltanet!.toArrow(), "token", "token_text");
    check(r.attention!.toArrow(), "query_token", "query_token_text");
    check(residualToArrow(r.residual!, r.span), "token", "token_text");
    // a span without a tokenizer gets the column only when one is given
    const bare = new RouterTrace(r.router!.ids, r.router!.weights, r.router!.logits, r.router!.probs, r.router!.sharedGate, { ids: r.span.ids, start: 0 });
    expect(bare.toArrow().getChild("token_text")).toBeNull();
    check(bare.toArrow({ tokenizer: tok }), "token", "token_text");
  });
});
