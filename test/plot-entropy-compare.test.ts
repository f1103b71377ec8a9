// The per-token entropy chart and the two-prompt comparisons, against hand-made logits and routing.
import { describe, expect, it } from "vitest";
import { compareLogits, compareRouting, ExpertLoad, RouterTrace, Tensor, tokenEntropy, load } from "moelens";

const LN2 = Math.log(2);
const LN3 = Math.log(3);
const decoder = { decode: (ids: ArrayLike<number>) => ["a", " b", "\n", "<d>"][ids[0]] };

function routing(ids: number[], experts: number): RouterTrace {
  const T = ids.length;
  return new RouterTrace(
    new Tensor([1, T, 1], Int32Array.from(ids)),
    new Tensor([1, T, 1], new Float32Array(T).fill(1)),
    new Tensor([1, T, experts], new Float32Array(T * experts)),
    new Tensor([1, T, experts], new Float32Array(T * experts).fill(1 / experts)),
    new Tensor([1, T], new Float32Array(T)),
    { ids: Int32Array.from(ids), start: 0 },
  );
}

describe("tokenEntropy", () => {
  it("plots each prediction at the token it predicts: entropy and the actual token's surprisal", () => {
    const logits = new Tensor([3, 4], Float32Array.from([0, 0, 0, 0, 0, LN2, LN3, -Infinity, 9, -Infinity, -Infinity, -Infinity]));
    const fig = tokenEntropy({ logits, span: { ids: Int32Array.from([0, 1, 2]), start: 5 } }, { tokenizer: decoder });
    const [entropy, surprisal] = fig.data as { x: number[]; y: number[]; type: string }[];
    expect(entropy.x).toEqual([6, 7, 8]);
    expect(entropy.y[0]).toBeCloseTo(Math.log(4), 3);
    expect(entropy.y[1]).toBeCloseTo(1.0114042647073518, 3);
    expect(entropy.y[2]).toBe(0);
    expect(surprisal.type).toBe("bar");
    expect(surprisal.x).toEqual([6, 7]);
    expect(surprisal.y[0]).toBeCloseTo(Math.log(4), 3); // token 1 under the uniform row
    expect(surprisal.y[1]).toBeCloseTo(LN2, 3); // token 2 had probability 1/2
    const axis = fig.layout.xaxis as { ticktext: string[]; tickvals: number[] };
    expect(axis.ticktext).toEqual([" b", "↵", "⟨next⟩"]);
    expect(typeof fig.layout.title?.text).toBe("string");
    expect(tokenEntropy({ logits, span: { ids: Int32Array.from([0, 1, 2]), start: 0 } }, { surprisal: false }).data).toHaveLength(1);
  });

  it("refuses logits that are not one row per token", () => {
    const logits = new Tensor([1, 4], new Float32Array(4));
    expect(() => tokenEntropy({ logits, span: { ids: Int32Array.from([0, 1]), start: 0 } })).toThrow(/1 rows of logits for 2 tokens \(prefill with logits: "all"\)/);
  });

  it("draws a real prefill, labelled with the model's own tokenizer", async () => {
    const model = await load(undefined, { threads: 1 });
    const ids = model.tokenizer!.encode("The jury said that");
    const r = await model.session().prefill(ids, { logits: "all" });
    const fig = tokenEntropy(r);
    expect((fig.layout.xaxis as { ticktext: string[] }).ticktext[0]).toBe(" jury");
    expect((fig.data[0] as unknown as { y: number[] }).y.every((h) => h >= 0 && h <= Math.log(model.config.vocabSize))).toBe(true);
    model.tokenizer!.close();
  });
});

describe("compareLogits and compareRouting", () => {
  it("compareLogits: grouped bars over both sides' top tokens, total variation in the title", () => {
    const fig = compareLogits([0, LN3, -Infinity, -Infinity], [LN3, 0, -Infinity, -Infinity], { top: 1, names: ["France", "Germany"], tokenizer: decoder });
    const [a, b] = fig.data as unknown as { name: string; y: number[]; customdata: number[] }[];
    expect([a.name, b.name]).toEqual(["France", "Germany"]);
    expect(a.customdata).toEqual([0, 1]);
    expect(a.y).toEqual([0.25, 0.75]);
    expect(b.y).toEqual([0.75, 0.25]);
    expect(fig.layout.title?.text).toContain("total variation 0.500");
    expect((fig.layout.xaxis as { ticktext: string[] }).ticktext).toEqual(["a", " b"]);
    expect(fig.layout.barmode).toBe("group");
    expect(() => compareLogits([0, 1], [0, 1, 2])).toThrow(/rows differ in length \(2, 3\)/);
    expect(() => compareLogits([0], [0], { top: 0 })).toThrow(/top must be a positive integer/);
  });

  it("compareRouting: B's share of tokens per expert minus A's, from traces or expert loads", () => {
    const A = routing([0, 0], 3);
    const B = routing([0, 2], 3);
    const fig = compareRouting(A, B, { names: ["prose", "code"] });
    const heat = fig.data[0] as unknown as { z: number[][]; zmin: number; zmax: number; customdata: string[][] };
    expect(heat.z).toEqual([[-0.5, 0, 0.5]]);
    expect([heat.zmin, heat.zmax]).toEqual([-0.5, 0.5]);
    expect(heat.customdata[0][2]).toBe("prose: 0.000, code: 0.500");
    expect(compareRouting(ExpertLoad.from([A]), ExpertLoad.from([B])).data[0].z).toEqual(heat.z);
    expect(fig.layout.title?.text).toContain("code (2 tokens) minus prose (2 tokens)");
    expect(() => compareRouting(A, routing([0], 4))).toThrow(/models of other shapes/);
  });
});
