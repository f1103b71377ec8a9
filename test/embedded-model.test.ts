// The embedded default model (models/moelens-tiny), run by our CPU backend: what load()
// opens with no argument, its held-out perplexity against the transformers figure recorded when it was
// trained, live and domain-dependent routing, and English-like greedy text.
import * as fs from "node:fs";
import * as path from "node:path";
import { beforeAll, expect, test } from "vitest";
import { embeddedModelDir, load, loadTokenizer, type Model, type Tokenizer } from "moelens";
import { evaluateHeldout, expertShares, meanRoutingDistance, readHeldout, type HeldoutResult } from "../scripts/train-tiny/heldout-eval";

const heldout = readHeldout(path.join(__dirname, "data", "heldout-tiny.json"));
const byDomain = (domain: string) => heldout.segments.flatMap((s, i) => (s.domain === domain ? [i] : []));

let model: Model;
let tokenizer: Tokenizer;
let result: HeldoutResult;

beforeAll(async () => {
  model = await load();
  tokenizer = await loadTokenizer(embeddedModelDir);
  result = await evaluateHeldout(model, heldout.segments);
});

test("load() opens the shipped MLX 4-bit export (30 MB at most), with its tokenizer and card", () => {
  expect(model.dir).toBe(path.resolve(embeddedModelDir));
  const weights = fs.statSync(path.join(embeddedModelDir, "model.safetensors")).size;
  expect(weights).toBeLessThanOrEqual(30e6);
  for (const f of ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "README.md"]) {
    expect(fs.existsSync(path.join(embeddedModelDir, f)), f).toBe(true);
  }
  const config = JSON.parse(fs.readFileSync(path.join(embeddedModelDir, "config.json"), "utf8"));
  expect(config.model_type).toBe("qwen3_5_moe");
  expect(config.quantization).toMatchObject({ group_size: 64, bits: 4, mode: "affine" });
  expect(config.quantization["language_model.model.layers.0.mlp.gate"]).toEqual({ group_size: 64, bits: 8 });
  expect(config.quantization["language_model.model.layers.0.mlp.shared_expert_gate"]).toEqual({ group_size: 64, bits: 8 });
  expect(model.config.numExperts).toBeGreaterThanOrEqual(16);
  expect(model.config.vocabSize % 64).toBe(0);
});

test("the tokenizer and chat template are ChatML with <think> support", () => {
  const imEnd = tokenizer.tokenToId("<|im_end|>");
  expect(imEnd).toBeDefined();
  expect(tokenizer.eosTokenId).toBe(imEnd);
  expect(tokenizer.decode(tokenizer.encode("The jury said 12 + 30 = 42."))).toBe("The jury said 12 + 30 = 42.");
  const chat = tokenizer.chatTemplate!;
  const messages = [{ role: "user" as const, content: "Hi" }];
  expect(chat.render(messages, { addGenerationPrompt: true })).toBe("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  expect(chat.render(messages, { addGenerationPrompt: true, enableThinking: false })).toBe(
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
  );
});

test("held-out perplexity equals transformers' within 0.5 %", () => {
  const ref = heldout.transformers.mlx_dequant_fp32;
  expect(result.tokens).toBe(ref.tokens);
  expect(Math.abs(result.ppl / ref.ppl - 1)).toBeLessThan(0.005);
});

test("routing is alive: every expert of every layer gets at least 1 % of held-out tokens", () => {
  const shares = expertShares(result, heldout.segments.map((_, i) => i));
  expect(shares.length).toBe(model.config.numLayers);
  for (const [layer, row] of shares.entries()) {
    expect(row.length).toBe(model.config.numExperts);
    const [min, expert] = row.reduce((m, s, e) => (s < m[0] ? [s, e] : m), [Infinity, -1]);
    expect(min, `layer ${layer}, expert ${expert}`).toBeGreaterThanOrEqual(0.01);
  }
});

test("routing differs between domains far more than between texts of one domain", () => {
  const prose = byDomain("prose");
  const code = byDomain("code");
  const arithmetic = byDomain("arithmetic");
  expect(prose.length).toBeGreaterThanOrEqual(4);
  const within = meanRoutingDistance(result, prose.filter((_, i) => i % 2 === 0), prose.filter((_, i) => i % 2 === 1));
  for (const [a, b] of [
    [prose, code],
    [prose, arithmetic],
    [code, arithmetic],
  ]) {
    const between = meanRoutingDistance(result, a, b);
    expect(between).toBeGreaterThan(0.2);
    expect(between).toBeGreaterThan(2 * within);
  }
});

test("greedy text after 'The jury said' is English-like", async () => {
  const s = model.session();
  let r = await s.prefill(tokenizer.encode("The jury said"));
  const out: number[] = [];
  for (let i = 0; i < 24; i++) {
    const logits = r.logits.data;
    let best = 0;
    for (let v = 1; v < tokenizer.vocabSize; v++) if (logits[v] > logits[best]) best = v;
    out.push(best);
    r = await s.decode(best);
  }
  const text = tokenizer.decode(out);
  const plain = text.replace(/[^A-Za-z0-9 ,.;:'"!?()\n-]/g, "");
  expect(plain.length / text.length, text).toBeGreaterThan(0.9);
  const words = text.split(/\s+/).filter((w) => w.length > 0);
  expect(words.filter((w) => /^[A-Za-z']+[,.;:!?"]*$/.test(w)).length / words.length, text).toBeGreaterThan(0.7);
  const common = new Set(["the", "of", "and", "to", "a", "in", "that", "was", "he", "it", "for", "is", "on", "as", "with", "his", "be", "had", "by", "not"]);
  expect(new Set(words.map((w) => w.toLowerCase().replace(/[^a-z']/g, "")).filter((w) => common.has(w))).size, text).toBeGreaterThanOrEqual(2);
});
