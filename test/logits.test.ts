// The logits helpers against values worked out by hand, and on the embedded model's own logits.
import { describe, expect, it } from "vitest";
import { entropies, entropy, load, logProb, logSoftmax, nextTokenNll, perplexity, softmax, Tensor, tokenNll, topTokens } from "moelens";

const LN2 = Math.log(2);
const LN3 = Math.log(3);

describe("logits helpers", () => {
  it("softmax and logSoftmax: p ∝ exp(logit / temperature), -Infinity gets 0", () => {
    const row = Float32Array.from([0, LN2, LN3, -Infinity]);
    const p = softmax(row);
    [1 / 6, 2 / 6, 3 / 6, 0].forEach((q, i) => expect(p[i]).toBeCloseTo(q, 6));
    expect(logSoftmax(row)[0]).toBeCloseTo(-Math.log(6), 6);
    expect(logSoftmax(row)[3]).toBe(-Infinity);
    // temperature 2 halves the logits: [0, ln 4] -> [0, ln 2] -> [1/3, 2/3]
    const t = softmax([0, Math.log(4)], 2);
    expect(t[0]).toBeCloseTo(1 / 3, 12);
    expect(t[1]).toBeCloseTo(2 / 3, 12);
    // large logits do not overflow
    const big = softmax([1000, 1000]);
    expect(big[0]).toBeCloseTo(0.5, 12);
    expect(big[1]).toBeCloseTo(0.5, 12);
    expect(logProb([0, LN2, LN3], 2)).toBeCloseTo(Math.log(1 / 2), 6);
  });

  it("entropy in nats: 0 for a certain token, log(n) when uniform, a worked case", () => {
    expect(entropy([5, -Infinity, -Infinity])).toBe(0);
    expect(entropy([1, 1, 1, 1])).toBeCloseTo(Math.log(4), 12);
    // p = [1/6, 1/3, 1/2]: -(1/6 ln 1/6 + 1/3 ln 1/3 + 1/2 ln 1/2)
    expect(entropy(Float32Array.from([0, LN2, LN3]))).toBeCloseTo(1.0114042647073518, 6);
    const rows = new Tensor([2, 3], Float32Array.from([0, LN2, LN3, 7, 7, 7]));
    const h = entropies(rows);
    expect(h[0]).toBeCloseTo(1.0114042647073518, 6);
    expect(h[1]).toBeCloseTo(Math.log(3), 6);
  });

  it("per-token NLL and perplexity", () => {
    const logits = new Tensor([2, 2], Float32Array.from([2, 0, 0, 0]));
    const nll = tokenNll(logits, [1, 0]);
    expect(nll[0]).toBeCloseTo(Math.log(Math.E ** 2 + 1), 6); // 2.1269...
    expect(nll[1]).toBeCloseTo(LN2, 6);
    expect(perplexity(nll)).toBeCloseTo(4.096109397692071, 5);
    expect(perplexity([LN2, LN2])).toBeCloseTo(2, 12); // a fair coin per token
    // nextTokenNll: row t predicts ids[t + 1]; the last row predicts nothing.
    const three = new Tensor([3, 2], Float32Array.from([2, 0, 0, 0, 9, 9]));
    expect(Array.from(nextTokenNll(three, [0, 1, 0]))).toEqual(Array.from(nll));
  });

  it("top tokens: best first, with probabilities and text", () => {
    const row = Float32Array.from([0, LN3, -1, LN2]);
    const decoder = { decode: (ids: ArrayLike<number>) => `<${Array.from(ids).join(",")}>` };
    const top = topTokens(row, 2, decoder);
    expect(top.map((t) => t.id)).toEqual([1, 3]);
    expect(top.map((t) => t.text)).toEqual(["<1>", "<3>"]);
    const z = 1 + 3 + Math.exp(-1) + 2;
    expect(top[0].prob).toBeCloseTo(3 / z, 6);
    expect(top[1].prob).toBeCloseTo(2 / z, 6);
    expect(top[0].logProb).toBeCloseTo(Math.log(3 / z), 6);
    expect(topTokens(row, 10)).toHaveLength(4);
    expect(topTokens(row, 1)[0].text).toBeUndefined();
  });

  it("refuses bad input with a message naming the problem", () => {
    expect(() => softmax([])).toThrow(/logSoftmax: the logits row is empty/);
    expect(() => entropy([0, NaN])).toThrow(/entropy: logit 1 is NaN/);
    expect(() => entropy([-Infinity, -Infinity])).toThrow(/every logit is -Infinity/);
    expect(() => softmax([1, 2], 0)).toThrow(/temperature must be a number > 0, got 0/);
    expect(() => logProb([1, 2], 2)).toThrow(/token id 2 is not an integer in \[0, 2\)/);
    expect(() => tokenNll(new Tensor([2, 2], new Float32Array(4)), [0])).toThrow(/1 targets for 2 rows/);
    expect(() => tokenNll(new Tensor([1, 2], new Float32Array(2)), [5])).toThrow(/target 0 \(5\) is not a token id/);
    expect(() => nextTokenNll(new Tensor([1, 2], new Float32Array(2)), [0])).toThrow(/at least two tokens/);
    expect(() => nextTokenNll(new Tensor([3, 2], new Float32Array(6)), [0, 1])).toThrow(/3 rows of logits for 2 tokens/);
    expect(() => entropies(new Tensor([4], new Float32Array(4)))).toThrow(/must be \[rows, vocab\], got \[4\]/);
    expect(() => perplexity([])).toThrow(/no token losses/);
    expect(() => topTokens([1], 0)).toThrow(/k must be a positive integer, got 0/);
  });

  it("on the embedded model: the prefill's own logits give a finite perplexity, greedy top-1 has the lowest NLL", async () => {
    const model = await load(undefined, { threads: 1 });
    const ids = model.tokenizer!.encode("The jury said that the city");
    const r = await model.session().prefill(ids, { logits: "all" });
    const nll = nextTokenNll(r.logits, ids);
    expect(nll).toHaveLength(ids.length - 1);
    const ppl = perplexity(nll);
    expect(ppl).toBeGreaterThan(1);
    expect(ppl).toBeLessThan(model.config.vocabSize);
    const last = r.logits.index(ids.length - 1);
    const [best] = topTokens(last, 3, model.tokenizer);
    expect(best.id).toBe(last.argmax());
    expect(best.text).toBe(model.tokenizer!.decode([best.id]));
    expect(-best.logProb).toBeCloseTo(tokenNll(new Tensor([1, last.size], last.data), [best.id])[0], 6);
    expect(entropies(r.logits)[ids.length - 1]).toBeCloseTo(entropy(last), 10);
  });
});
