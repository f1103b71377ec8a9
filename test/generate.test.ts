// Streaming generation on the t1 fixture model with the t1-tokenizer: greedy equals a hand-written
// argmax loop, seeds reproduce, every stop condition ends it with the right reason, ids past the
// tokenizer's vocabulary are never produced, and a Conversation re-feeds only what each turn adds.
// The model runs on the CPU backend, or on MOELENS_TEST_GPU_BACKEND (e.g. "cuda") at exact precision.
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load, type GenerateChunk, type Model } from "moelens";
import { makeTextModelDir } from "./fixtures/t1-tokenizer/model-dir";
import { chosenGpuBackend } from "./helpers/gpu-backend";

const fixture = makeTextModelDir();
const modelOptions = chosenGpuBackend ? { backend: chosenGpuBackend, precision: "fp32" as const } : { threads: 1 };
let model: Model;

beforeAll(async () => {
  model = await load(fixture.dir, modelOptions);
});
afterAll(() => {
  model?.tokenizer?.close();
  fixture.remove();
});

async function collect(stream: AsyncIterable<GenerateChunk>): Promise<{ text: string; tokens: number[]; last: GenerateChunk; chunks: number }> {
  let text = "";
  const tokens: number[] = [];
  let last: GenerateChunk | undefined;
  let chunks = 0;
  for await (const c of stream) {
    text += c.text;
    tokens.push(...c.tokens);
    last = c;
    chunks++;
  }
  return { text, tokens, last: last!, chunks };
}

// The reference: prefill, then argmax over the tokenizer's ids, decode, repeat.
async function manualGreedy(prompt: number[], n: number): Promise<number[]> {
  const s = model.session();
  let logits = (await s.prefill(prompt)).logits.data;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    let best = 0;
    for (let v = 1; v < model.tokenizer!.vocabSize; v++) if (logits[v] > logits[best]) best = v;
    out.push(best);
    logits = (await s.decode(best)).logits.data;
  }
  return out;
}

const prompt = "The jury said";

describe(`generate on t1 + t1-tokenizer (${chosenGpuBackend ?? "cpu"})`, () => {
  it("loads the tokenizer and generation config with the model", () => {
    expect(model.tokenizer!.vocabSize).toBe(1000);
    expect(model.config.vocabSize).toBe(1024);
    expect(model.generationConfig.eosTokenIds).toEqual([997, 995]);
    expect(model.generationConfig.sampling).toMatchObject({ temperature: 0.7, topK: 20, topP: 0.95 });
  });

  it("greedy (temperature 0) equals an argmax loop, text equals the decoded ids", async () => {
    const s = model.session();
    const r = await collect(s.generate(prompt, { temperature: 0, maxTokens: 12, stopTokenIds: [] }));
    expect(r.tokens).toEqual(await manualGreedy(model.tokenizer!.encode(prompt), 12));
    expect(r.text).toBe(model.tokenizer!.decode(r.tokens));
    expect(r.last.finishReason).toBe("length");
    expect(r.chunks).toBe(13); // one per token, then the finish
    expect(r.last.tokens).toEqual([]);
    // The session holds the prompt and all generated tokens.
    expect(s.position).toBe(model.tokenizer!.encode(prompt).length + 12);
    const t = r.last.timings!;
    expect(t.promptTokens).toBe(model.tokenizer!.encode(prompt).length);
    expect(t.generatedTokens).toBe(12);
    expect(t.prefillTokensPerSecond).toBeGreaterThan(0);
    expect(t.decodeTokensPerSecond).toBeGreaterThan(0);
  });

  it("continues the session: two calls equal one longer call", async () => {
    const s = model.session();
    const first = await collect(s.generate(prompt, { temperature: 0, maxTokens: 5, stopTokenIds: [] }));
    const second = await collect(s.generate(" and", { temperature: 0, maxTokens: 5, stopTokenIds: [] }));
    const ids = [...model.tokenizer!.encode(prompt), ...first.tokens, ...model.tokenizer!.encode(" and")];
    expect(second.tokens).toEqual(await manualGreedy(ids, 5));
  });

  it("reproduces sampled tokens from a seed, and never yields ids past the tokenizer", async () => {
    const run = async (seed: number) =>
      (await collect(model.session().generate(prompt, { temperature: 3, seed, maxTokens: 40, stopTokenIds: [] }))).tokens;
    const a = await run(1);
    expect(await run(1)).toEqual(a);
    expect(await run(2)).not.toEqual(a);
    expect(a.every((id) => id < 1000)).toBe(true);
  });

  it("stops at a stop string, which the text leaves out", async () => {
    const full = await collect(model.session().generate(prompt, { temperature: 0, maxTokens: 12, stopTokenIds: [] }));
    const stop = full.text.slice(6, 9);
    const cut = full.text.indexOf(stop);
    const r = await collect(model.session().generate(prompt, { temperature: 0, maxTokens: 12, stop: [stop], stopTokenIds: [] }));
    expect(r.last.finishReason).toBe("stop");
    expect(r.text).toBe(full.text.slice(0, cut));
  });

  it("stops at an eos id without feeding or showing it", async () => {
    const full = await collect(model.session().generate(prompt, { temperature: 0, maxTokens: 8, stopTokenIds: [] }));
    const eos = full.tokens[3];
    const firstAt = full.tokens.indexOf(eos);
    const s = model.session();
    const r = await collect(s.generate(prompt, { temperature: 0, maxTokens: 8, stopTokenIds: [eos] }));
    expect(r.last.finishReason).toBe("eos");
    expect(r.tokens).toEqual(full.tokens.slice(0, firstAt + 1));
    expect(r.text).toBe(model.tokenizer!.decode(full.tokens.slice(0, firstAt)));
    expect(s.position).toBe(model.tokenizer!.encode(prompt).length + firstAt);
  });

  it("ends with 'abort' when the signal fires, before or during generation", async () => {
    const before = new AbortController();
    before.abort();
    const r0 = await collect(model.session().generate(prompt, { signal: before.signal }));
    expect(r0.last.finishReason).toBe("abort");
    expect(r0.tokens).toEqual([]);

    const during = new AbortController();
    let n = 0;
    let last: GenerateChunk | undefined;
    for await (const c of model.session().generate(prompt, { temperature: 0, maxTokens: 50, stopTokenIds: [], signal: during.signal })) {
      last = c;
      if (++n === 3) during.abort();
    }
    expect(n).toBe(4);
    expect(last!.finishReason).toBe("abort");
  });

  it("renders chat messages with the template and the thinking switch", async () => {
    const messages = [{ role: "user" as const, content: "Hi" }];
    const s = model.session();
    const r = await collect(s.generate(messages, { temperature: 0, maxTokens: 2, stopTokenIds: [], enableThinking: false }));
    const rendered = model.tokenizer!.chatTemplate!.render(messages, { addGenerationPrompt: true, enableThinking: false });
    expect(rendered.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(true);
    expect(r.last.timings!.promptTokens).toBe(model.tokenizer!.encode(rendered).length);
  });

  it("stops with 'length' where the context is full, whatever maxTokens asks", async () => {
    // The same weights with a 40-token context.
    const small = makeTextModelDir();
    const config = path.join(small.dir, "config.json");
    const json = JSON.parse(fs.readFileSync(config, "utf8"));
    (json.text_config ?? json).max_position_embeddings = 40;
    fs.rmSync(config);
    fs.writeFileSync(config, JSON.stringify(json));
    const m = await load(small.dir, modelOptions);
    try {
      expect(m.config.maxPositionEmbeddings).toBe(40);
      const promptIds = m.tokenizer!.encode(prompt);
      const s = m.session();
      const r = await collect(s.generate(promptIds, { temperature: 0, maxTokens: 1000, stopTokenIds: [] }));
      expect(r.last.finishReason).toBe("length");
      expect(r.tokens.length).toBe(40 - promptIds.length);
      expect(r.last.timings!.generatedTokens).toBe(40 - promptIds.length);
      expect(s.position).toBe(40);
      expect(r.tokens).toEqual(await manualGreedy(promptIds, 40 - promptIds.length));
      // A prompt that fills the context exactly generates nothing; one more token does not fit.
      const filling = Array.from({ length: 40 }, (_, i) => promptIds[i % promptIds.length]);
      const full = await collect(m.session().generate(filling, { temperature: 0, maxTokens: 5 }));
      expect(full.tokens).toEqual([]);
      expect(full.last.finishReason).toBe("length");
      await expect(collect(s.generate([2], { maxTokens: 1 }))).rejects.toThrow(
        "generate: the prompt (1 tokens) does not fit: the session holds 40 of the model's 40 positions",
      );
    } finally {
      m.tokenizer?.close();
      small.remove();
    }
  });

  it("rejects an empty prompt and bad options", async () => {
    await expect(collect(model.session().generate(""))).rejects.toThrow(/prompt is empty/);
    await expect(collect(model.session().generate(prompt, { maxTokens: -1 }))).rejects.toThrow(/maxTokens/);
    await expect(collect(model.session().generate(prompt, { topP: 2 }))).rejects.toThrow(/topP/);
  });
});

describe("Conversation", () => {
  it("re-feeds only the new turn and answers as a fresh session on the whole prompt would", async () => {
    const chat = model.conversation({ system: "Be brief.", enableThinking: false });
    const opts = { temperature: 0, maxTokens: 6, stopTokenIds: [] };
    const first = await collect(chat.send("Hello", opts));
    const firstFed = chat.promptTokensFed;
    const second = await collect(chat.send("And then?", opts));
    expect(chat.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant"]);
    expect(chat.messages[2].content).toBe(first.text);

    const history = chat.messages.slice(0, 4);
    const tok = model.tokenizer!;
    const full = tok.encode(tok.chatTemplate!.render(history, { addGenerationPrompt: true, enableThinking: false }));
    // Turn 2 reuses turn 1's prompt up to its assistant header, that is all of it but the empty
    // think block "<think>", "\n\n", "</think>", "\n\n" that the history form of a reply lacks.
    expect(full.length - chat.promptTokensFed).toBe(firstFed - 4);
    expect(second.tokens).toEqual(await manualGreedy(full, 6));
  });
});
