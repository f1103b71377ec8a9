// The OpenAI-compatible server (sdk/serve) on the t1 fixture with the t1-tokenizer, driven over
// loopback with the official `openai` client: both endpoints, streaming and not, sampling parameters
// against the SDK's own generate(), stop strings and eos, usage with cached tokens, the routing
// extension against the SDK's ExpertLoad, the API key, the request log, and the `moelens serve` CLI.
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load, type GenerateOptions, type Model } from "moelens";
import { serve, type MoelensServer } from "../sdk/serve/server";
import type { Health } from "../sdk/serve/routes";
import type { RoutingSummary } from "../sdk/serve/routing-summary";
import { makeTextModelDir } from "./fixtures/t1-tokenizer/model-dir";

const fixture = makeTextModelDir();
let model: Model;
let server: MoelensServer;
let client: OpenAI;
const log: string[] = [];
const prompt = "The jury said";

beforeAll(async () => {
  model = await load(fixture.dir, { threads: 1 });
  server = await serve(model, { port: 0, log: (line) => log.push(line) });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(async () => {
  await server?.close();
  model?.tokenizer?.close();
  fixture.remove();
});

/** The SDK's text and tokens for the same request, on a fresh session. */
async function sdk(input: Parameters<ReturnType<Model["session"]>["generate"]>[0], options: GenerateOptions) {
  let text = "";
  const tokens: number[] = [];
  let finishReason;
  for await (const c of model.session().generate(input, { skipSpecialTokens: true, ...options })) {
    text += c.text;
    tokens.push(...c.tokens);
    finishReason = c.finishReason;
  }
  return { text, tokens, finishReason };
}

async function streamedCompletion(params: Record<string, unknown>) {
  const stream = await client.completions.create({ model: server.modelId, prompt, stream: true, ...params } as OpenAI.CompletionCreateParamsStreaming);
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

describe("moelens serve: endpoints", () => {
  it("GET /v1/models and /health describe the served model", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([path.basename(fixture.dir)]);
    expect((await client.models.retrieve(server.modelId)).id).toBe(server.modelId);
    const health = (await (await fetch(`${server.url}/health`)).json()) as Health;
    expect(health).toMatchObject({ status: "ok", model: server.modelId, queue: { running: 0, waiting: 0, max_waiting: 64 } });
  });

  it("chat completions, whole and streamed, equal the SDK's generate on the same messages", async () => {
    const messages = [
      { role: "system" as const, content: "Be brief." },
      { role: "user" as const, content: "Hello" },
    ];
    const expected = await sdk(messages, { temperature: 0, maxTokens: 12, enableThinking: false });
    const params = { model: server.modelId, messages, temperature: 0, max_tokens: 12, chat_template_kwargs: { enable_thinking: false } };
    const whole = await client.chat.completions.create(params);
    expect(whole.object).toBe("chat.completion");
    expect(whole.id).toMatch(/^chatcmpl-/);
    expect(whole.choices).toHaveLength(1);
    expect(whole.choices[0].message).toMatchObject({ role: "assistant", content: expected.text });
    expect(whole.choices[0].finish_reason).toBe("length");
    const rendered = model.tokenizer!.chatTemplate!.render(messages, { addGenerationPrompt: true, enableThinking: false });
    expect(whole.usage).toMatchObject({ prompt_tokens: model.tokenizer!.encode(rendered).length, completion_tokens: 12 });

    const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: "" });
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0].id)).toBe(true);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe(expected.text);
    const finish = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finish).toHaveLength(1);
    expect(finish[0].choices[0].finish_reason).toBe("length");
    const last = chunks[chunks.length - 1];
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: whole.usage!.prompt_tokens, completion_tokens: 12 });
    // The same prompt again: all of it but its last token comes from the prefix cache.
    expect(last.usage!.prompt_tokens_details!.cached_tokens).toBe(whole.usage!.prompt_tokens - 1);
  });

  it("text completions, whole and streamed (SSE then [DONE]), from a string or token ids", async () => {
    const expected = await sdk(prompt, { temperature: 0, maxTokens: 10 });
    const whole = await client.completions.create({ model: server.modelId, prompt, temperature: 0, max_tokens: 10 });
    expect(whole.object).toBe("text_completion");
    expect(whole.choices[0].text).toBe(expected.text);
    const ids = await client.completions.create({ model: server.modelId, prompt: model.tokenizer!.encode(prompt), temperature: 0, max_tokens: 10 });
    expect(ids.choices[0].text).toBe(expected.text);
    const chunks = await streamedCompletion({ temperature: 0, max_tokens: 10 });
    expect(chunks.map((c) => c.choices[0].text).join("")).toBe(expected.text);
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe("length");

    // The wire format itself: data: events, the last one [DONE].
    const raw = await fetch(`${server.url}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ model: server.modelId, prompt, temperature: 0, max_tokens: 3, stream: true }),
    });
    expect(raw.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const events = (await raw.text()).split("\n\n").filter(Boolean);
    expect(events.every((e) => e.startsWith("data: "))).toBe(true);
    expect(events[events.length - 1]).toBe("data: [DONE]");
  });

  it("passes every sampling parameter through: each changes the text exactly as in the SDK", async () => {
    const base = { temperature: 1.2, seed: 7, max_tokens: 24 };
    const sdkBase = { temperature: 1.2, seed: 7, maxTokens: 24 };
    const baseline = await sdk(prompt, sdkBase);
    const variants: [Record<string, number>, GenerateOptions][] = [
      [{ seed: 8 }, { seed: 8 }],
      [{ temperature: 0.3 }, { temperature: 0.3 }],
      [{ top_k: 3 }, { topK: 3 }],
      [{ top_p: 0.5 }, { topP: 0.5 }],
      [{ min_p: 0.2 }, { minP: 0.2 }],
      [{ presence_penalty: 2 }, { presencePenalty: 2 }],
      [{ frequency_penalty: 2 }, { frequencyPenalty: 2 }],
    ];
    const same = await client.completions.create({ model: server.modelId, prompt, ...base });
    expect(same.choices[0].text).toBe(baseline.text);
    for (const [param, option] of variants) {
      const expected = await sdk(prompt, { ...sdkBase, ...option });
      expect(expected.text, JSON.stringify(param)).not.toBe(baseline.text);
      const r = await client.completions.create({ model: server.modelId, prompt, ...base, ...param });
      expect(r.choices[0].text, JSON.stringify(param)).toBe(expected.text);
    }
  });

  it("stops before a stop string (one or several), streamed or not", async () => {
    const greedy = await sdk(prompt, { temperature: 0, maxTokens: 16 });
    const stop = greedy.text.slice(8, 11);
    const cut = greedy.text.indexOf(stop);
    expect(cut).toBeGreaterThan(0);
    const r = await client.completions.create({ model: server.modelId, prompt, temperature: 0, max_tokens: 16, stop });
    expect(r.choices[0]).toMatchObject({ text: greedy.text.slice(0, cut), finish_reason: "stop" });
    const two = await client.completions.create({ model: server.modelId, prompt, temperature: 0, max_tokens: 16, stop: ["\u0000never", stop] });
    expect(two.choices[0].text).toBe(greedy.text.slice(0, cut));
    const chunks = await streamedCompletion({ temperature: 0, max_tokens: 16, stop: [stop] });
    expect(chunks.map((c) => c.choices[0].text).join("")).toBe(greedy.text.slice(0, cut));
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe("stop");
  });

  it("ends at an eos id with finish_reason 'stop', and ignore_eos generates past it", async () => {
    // A copy of the model whose generation_config.json names the 4th greedy token as eos.
    const greedy = await sdk(prompt, { temperature: 0, maxTokens: 10 });
    const eos = greedy.tokens[3];
    const firstAt = greedy.tokens.indexOf(eos);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-serve-eos-"));
    for (const f of fs.readdirSync(fixture.dir)) {
      if (f !== "generation_config.json") fs.symlinkSync(path.join(fixture.dir, f), path.join(dir, f));
    }
    fs.writeFileSync(path.join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: [eos] }));
    const eosModel = await load(dir, { threads: 1 });
    const eosServer = await serve(eosModel, { port: 0, modelId: "eos", log: () => undefined });
    try {
      const c = new OpenAI({ baseURL: `${eosServer.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const r = await c.completions.create({ model: "eos", prompt, temperature: 0, max_tokens: 10 });
      expect(r.choices[0]).toMatchObject({ text: model.tokenizer!.decode(greedy.tokens.slice(0, firstAt)), finish_reason: "stop" });
      expect(r.usage!.completion_tokens).toBe(firstAt + 1); // the eos id counts, as it was generated
      const past = await c.completions.create({ model: "eos", prompt, temperature: 0, max_tokens: 10, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
      expect(past.choices[0]).toMatchObject({ text: greedy.text, finish_reason: "length" });
      expect(past.usage!.completion_tokens).toBe(10);
    } finally {
      await eosServer.close();
      eosModel.tokenizer?.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reuses cached sessions only when their whole history starts the prompt, and counts those tokens", async () => {
    const tok = model.tokenizer!;
    const ids = tok.encode("A fresh prompt for the cache");
    const ask = (p: number[], max = 6) => client.completions.create({ model: server.modelId, prompt: p, temperature: 0, max_tokens: max });
    const first = await ask(ids);
    expect(first.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    expect((await ask(ids)).usage!.prompt_tokens_details!.cached_tokens).toBe(ids.length - 1);
    // Continuing the first reply: prompt + the 6 generated tokens are held by a cached session.
    const generated = (await sdk(ids, { temperature: 0, maxTokens: 6 })).tokens;
    const longer = [...ids, ...generated, ...tok.encode(" and more")];
    const cont = await ask(longer);
    expect(cont.usage!.prompt_tokens_details!.cached_tokens).toBe(ids.length + 6);
    expect(cont.choices[0].text).toBe((await sdk(longer, { temperature: 0, maxTokens: 6 })).text);
    // Changing one early token leaves no usable history (DeltaNet state cannot be rewound).
    const changed = [ids[0] === 5 ? 6 : 5, ...ids.slice(1)];
    expect((await ask(changed)).usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    const health = (await (await fetch(`${server.url}/health`)).json()) as Health;
    expect(health.prefix_cache.entries).toBeLessThanOrEqual(8);
  });

  it("keeps chat states at conversation boundaries: other questions after the same system prompt and the next turn reuse them", async () => {
    const tpl = model.tokenizer!.chatTemplate!;
    const length = (messages: OpenAI.ChatCompletionMessageParam[]) => model.tokenizer!.encode(tpl.render(messages as never)).length;
    const system: OpenAI.ChatCompletionMessageParam = { role: "system", content: "You answer questions about juries." };
    const question: OpenAI.ChatCompletionMessageParam = { role: "user", content: "Who sits on a jury?" };
    const ask = (messages: OpenAI.ChatCompletionMessageParam[]) =>
      client.chat.completions.create({ model: server.modelId, messages, temperature: 0, max_tokens: 5, chat_template_kwargs: { enable_thinking: false } } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const first = await ask([system, question]);
    expect(first.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    // Same system prompt, another question: the system message's state is reused.
    const other = await ask([system, { role: "user", content: "What is a verdict?" }]);
    expect(other.usage!.prompt_tokens_details!.cached_tokens).toBe(length([system]));
    // The next turn: the first conversation up to its generation prompt is reused (the reply's
    // history form differs from the generation prompt's empty think block, so not further).
    const next: OpenAI.ChatCompletionMessageParam[] = [system, question, { role: "assistant", content: first.choices[0].message.content }, { role: "user", content: "And then?" }];
    const second = await ask(next);
    expect(second.usage!.prompt_tokens_details!.cached_tokens).toBe(length([system, question]));
    expect(second.choices[0].message.content).toBe((await sdk(next as never, { temperature: 0, maxTokens: 5, enableThinking: false })).text);
  });

  it("the routing extension reports the expert load of the prompt and the generated tokens", async () => {
    const ids = model.tokenizer!.encode("Routing is what we look at");
    const body = { model: server.modelId, prompt: ids, temperature: 0, max_tokens: 5 };
    const plain = await client.completions.create(body);
    expect((plain as unknown as { moelens?: unknown }).moelens).toBeUndefined();
    const withRouting = () => client.completions.create({ ...body, moelens: { routing: true } } as OpenAI.CompletionCreateParamsNonStreaming);
    const a = await withRouting();
    // The plain request's cached sessions have no router record, so this one fed everything.
    expect(a.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    const routing = (a as unknown as { moelens: { routing: RoutingSummary } }).moelens.routing;

    // The reference: the same tokens through one session with router capture.
    const generated = (await sdk(ids, { temperature: 0, maxTokens: 5 })).tokens;
    const s = model.session();
    await s.prefill([...ids, ...generated.slice(0, 4)], { capture: ["router"] });
    await s.decode(generated[4], { capture: ["router"] });
    const load = s.expertLoad!;
    expect(routing.tokens).toBe(ids.length + 5);
    expect(routing.experts).toBe(model.config.numExperts);
    expect(routing.experts_per_token).toBe(model.config.expertsPerToken);
    expect(routing.layers).toHaveLength(model.config.numLayers);
    for (const l of routing.layers) {
      expect(l.counts).toEqual(Array.from(load.counts.index(l.layer).data));
      expect(l.counts.reduce((x, y) => x + y, 0)).toBe(routing.tokens * routing.experts_per_token);
      expect(l.entropy).toBeCloseTo(load.entropy(l.layer), 10);
      expect(l.top[0].count).toBe(Math.max(...l.counts));
    }
    expect(routing.aux_loss).toBeCloseTo(load.auxLoss(), 6);

    // Again: now from the cache, whose routed part is added in; same summary.
    const b = await withRouting();
    expect(b.usage!.prompt_tokens_details!.cached_tokens).toBe(ids.length - 1);
    // Same counts; the float32 probability mass was summed in another order, hence aux_loss to 1e-6.
    const sameSummary = (r: RoutingSummary) => {
      expect({ ...r, aux_loss: 0 }).toEqual({ ...routing, aux_loss: 0 });
      expect(r.aux_loss).toBeCloseTo(routing.aux_loss, 6);
    };
    sameSummary((b as unknown as { moelens: { routing: RoutingSummary } }).moelens.routing);

    // Streamed: the summary rides on the chunk that carries finish_reason.
    const chunks = await streamedCompletion({ prompt: ids, temperature: 0, max_tokens: 5, moelens: { routing: true } });
    const withSummary = chunks.filter((c) => (c as unknown as { moelens?: unknown }).moelens);
    expect(withSummary).toHaveLength(1);
    expect(withSummary[0].choices[0].finish_reason).toBe("length");
    sameSummary((withSummary[0] as unknown as { moelens: { routing: RoutingSummary } }).moelens.routing);
  });

  it("logs one line per request: method, path, status, tokens, speed", async () => {
    const before = log.length;
    await client.completions.create({ model: server.modelId, prompt, temperature: 0, max_tokens: 4 });
    await expect(client.completions.create({ model: "other", prompt })).rejects.toThrow();
    await new Promise((r) => setTimeout(r, 50));
    const lines = log.slice(before);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^\S+Z POST \/v1\/completions 200 prompt=4 cached=\d+ completion=4 finish=length queue=\d+ms prefill=\d+ms [\d.]+ tok\/s \d+ ms$/);
    expect(lines[1]).toMatch(/^\S+Z POST \/v1\/completions 404 \d+ ms error: "the model 'other' does not exist/);
  });
});

describe("moelens serve: API key (and no prefix cache)", () => {
  it("answers 401 without the key (or with a wrong one) and serves with it; /health stays open", async () => {
    const keyed = await serve(model, { port: 0, apiKey: "sesame", prefixCache: { entries: 0 }, log: () => undefined });
    try {
      const wrong = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: "nope", maxRetries: 0 });
      const err = await wrong.models.list().catch((e) => e);
      expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
      expect(err.status).toBe(401);
      expect(err.error).toEqual({ message: "incorrect API key", type: "invalid_request_error", param: null, code: "invalid_api_key" });
      const none = await fetch(`${keyed.url}/v1/completions`, { method: "POST", body: "{}" });
      expect(none.status).toBe(401);
      expect(((await none.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key");
      expect((await fetch(`${keyed.url}/health`)).status).toBe(200);
      const right = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: "sesame", maxRetries: 0 });
      const r = await right.completions.create({ model: keyed.modelId, prompt, temperature: 0, max_tokens: 3 });
      expect(r.choices[0].text).toBe((await sdk(prompt, { temperature: 0, maxTokens: 3 })).text);
      // This server has its prefix cache off: a repeated prompt is fed again.
      const again = await right.completions.create({ model: keyed.modelId, prompt, temperature: 0, max_tokens: 3 });
      expect(again.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
      expect(keyed.engine.cache.size).toBe(0);
    } finally {
      await keyed.close();
    }
  });
});

describe("moelens serve (command line)", () => {
  const root = path.resolve(__dirname, "..");
  const tsx = path.join(root, "node_modules", "tsx", "dist", "cli.mjs");
  // The CLI from the sources (bin/moelens.js runs the same main() from dist/).
  const cli = (args: string[]) =>
    spawn(process.execPath, [tsx, "-e", `require("./sdk/cli/main").main(${JSON.stringify(args)}).then((s) => { process.exitCode = s; })`], {
      cwd: root,
      env: { ...process.env, MOELENS_API_KEY: "" },
    });
  const finished = (child: ReturnType<typeof cli>) =>
    new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      child.on("close", (status) => resolve({ status, stdout, stderr }));
    });

  it("serves on a free port with a key, logs requests, and stops on SIGTERM", async () => {
    const child = cli(["serve", "--model", fixture.dir, "--threads", "1", "--port", "0", "--api-key", "k1", "--max-queue", "3"]);
    const done = finished(child);
    let stderr = "";
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on("data", (d) => {
        stderr += d;
        const m = /at (http:\/\/127\.0\.0\.1:\d+)\/v1/.exec(stderr);
        if (m) resolve(m[1]);
      });
      child.on("close", () => reject(new Error(`serve exited: ${stderr}`)));
    });
    const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: "k1", maxRetries: 0 });
    const r = await c.completions.create({ model: path.basename(fixture.dir), prompt, temperature: 0, max_tokens: 5 });
    expect(r.choices[0].text).toBe((await sdk(prompt, { temperature: 0, maxTokens: 5 })).text);
    const health = (await (await fetch(`${url}/health`)).json()) as Health;
    expect(health.queue.max_waiting).toBe(3);
    child.kill("SIGTERM");
    const end = await done;
    expect(end.status).toBe(0);
    expect(end.stderr).toMatch(/POST \/v1\/completions 200 prompt=4 cached=0 completion=5/);
    expect(end.stderr).toContain("moelens serve: stopped");
  }, 60_000);

  it("--help, and usage errors with exit status 2", async () => {
    const [help, bad, unknown, limit] = await Promise.all([
      finished(cli(["serve", "--help"])),
      finished(cli(["serve", "--port", "http"])),
      finished(cli(["serve", "--nope"])),
      finished(cli(["serve", "--max-request-bytes", "0"])),
    ]);
    expect(help.status).toBe(0);
    for (const flag of ["--model", "--host", "--port", "--api-key", "--max-queue", "--max-request-bytes", "--prefix-cache"]) expect(help.stdout).toContain(flag);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--port http: must be an integer in [0, 65535]");
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/--nope/);
    expect(limit.status).toBe(2);
    expect(limit.stderr).toContain("--max-request-bytes 0: must be an integer >= 1");
  }, 60_000);
});
