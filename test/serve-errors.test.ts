// Bad input to the server: malformed JSON, wrong types, unsupported options, huge bodies, unknown
// models and routes, prompts past the context, invalid UTF-8, broken HTTP, clients that vanish
// mid-body. Each gets a 4xx with an OpenAI-shaped error, and the server keeps serving.
import * as net from "node:net";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load, type Model } from "moelens";
import { serve, type MoelensServer } from "../sdk/serve/server";
import type { Health } from "../sdk/serve/routes";
import { makeTextModelDir } from "./fixtures/t1-tokenizer/model-dir";

const fixture = makeTextModelDir();
const maxRequestBytes = 64 * 1024;
let model: Model;
let server: MoelensServer;
let client: OpenAI;
const log: string[] = [];

beforeAll(async () => {
  model = await load(fixture.dir, { threads: 1 });
  server = await serve(model, { port: 0, maxRequestBytes, log: (line) => log.push(line) });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(async () => {
  await server?.close();
  model?.tokenizer?.close();
  fixture.remove();
});

/** Checks the OpenAI error shape; returns the error object. */
function openAiError(body: unknown): { message: string; type: string; param: string | null; code: string | null } {
  expect(Object.keys(body as object)).toEqual(["error"]);
  const e = (body as { error: Record<string, unknown> }).error;
  expect(Object.keys(e).sort()).toEqual(["code", "message", "param", "type"]);
  expect(typeof e.message).toBe("string");
  expect((e.message as string).length).toBeGreaterThan(10);
  expect(e.type).toBe("invalid_request_error");
  return e as ReturnType<typeof openAiError>;
}

async function post(path: string, body: string | Uint8Array, headers: Record<string, string> = {}) {
  const r = await fetch(`${server.url}${path}`, { method: "POST", body, headers: { "Content-Type": "application/json", ...headers } });
  return { status: r.status, headers: r.headers, body: await r.json() };
}

/** The server still answers a real request correctly. */
async function stillServes() {
  const r = await client.completions.create({ model: server.modelId, prompt: "The jury said", temperature: 0, max_tokens: 3 });
  expect(r.choices[0].finish_reason).toBe("length");
  expect(r.usage!.completion_tokens).toBe(3);
}

const chat = (extra: Record<string, unknown>) => ({ model: server.modelId, messages: [{ role: "user", content: "Hi" }], max_tokens: 2, ...extra });

describe("moelens serve: bad input", () => {
  it("malformed JSON, an empty body and a non-object body are 400s", async () => {
    for (const body of ['{"model": "x", ', "", "[1, 2]", "null", "not json at all"]) {
      const r = await post("/v1/chat/completions", body);
      expect(r.status, body).toBe(400);
      expect(openAiError(r.body).code, body).toMatch(/^invalid_(json|type)$/);
    }
    await stillServes();
  });

  it("invalid UTF-8 in the body is a 400", async () => {
    const bytes = new TextEncoder().encode(JSON.stringify(chat({ messages: [{ role: "user", content: "Hi XX" }] })));
    const at = bytes.indexOf("X".charCodeAt(0));
    bytes.set([0xc3, 0x28], at); // a lead byte followed by a non-continuation byte
    const r = await post("/v1/chat/completions", bytes);
    expect(r.status).toBe(400);
    expect(openAiError(r.body).code).toBe("invalid_encoding");
    await stillServes();
  });

  it("wrong types and values are 400s that name the field", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ temperature: "hot" }, "temperature"],
      [{ temperature: -1 }, "temperature"],
      [{ top_p: 0 }, "top_p"],
      [{ top_p: 1.5 }, "top_p"],
      [{ top_k: 2.5 }, "top_k"],
      [{ max_tokens: 0 }, "max_tokens"],
      [{ max_tokens: "ten" }, "max_tokens"],
      [{ seed: 1.5 }, "seed"],
      [{ presence_penalty: 3 }, "presence_penalty"],
      [{ frequency_penalty: [] }, "frequency_penalty"],
      [{ stop: 5 }, "stop"],
      [{ stop: [""] }, "stop"],
      [{ stream: "yes" }, "stream"],
      [{ stream: true, stream_options: { include_usage: 1 } }, "stream_options.include_usage"],
      [{ model: 7 }, "model"],
      [{ model: undefined }, "model"],
      [{ messages: "Hi" }, "messages"],
      [{ messages: [] }, "messages"],
      [{ messages: [{ role: "wizard", content: "Hi" }] }, "messages[0].role"],
      [{ messages: [{ role: "user", content: 5 }] }, "messages[0].content"],
      [{ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, "messages[0].content[0]"],
      [{ n: 2 }, "n"],
      [{ logprobs: true }, "logprobs"],
      [{ logit_bias: { "5": 10 } }, "logit_bias"],
      [{ response_format: { type: "json_object" } }, "response_format"],
      [{ chat_template_kwargs: { enable_thinking: "no" } }, "chat_template_kwargs.enable_thinking"],
      [{ moelens: { routing: "yes" } }, "moelens.routing"],
      [{ moelens: { attention: true } }, "moelens.attention"],
    ];
    for (const [extra, param] of cases) {
      const err = await client.chat.completions.create(chat(extra) as never).catch((e) => e);
      expect(err, param).toBeInstanceOf(OpenAI.BadRequestError);
      expect(openAiError({ error: err.error }).param, JSON.stringify(extra)).toBe(param);
    }
    const completions: [Record<string, unknown>, string][] = [
      [{ prompt: 5 }, "prompt"],
      [{ prompt: "" }, "prompt"],
      [{ prompt: [1, -2] }, "prompt"],
      [{ prompt: [1, 5000] }, "prompt"], // past the model's vocabulary (1024)
      [{ prompt: ["a", "b"] }, "prompt"],
      [{ prompt: "x", echo: true }, "echo"],
      [{ prompt: "x", best_of: 2 }, "best_of"],
    ];
    for (const [extra, param] of completions) {
      const err = await client.completions.create({ model: server.modelId, max_tokens: 2, ...extra } as never).catch((e) => e);
      expect(err, param).toBeInstanceOf(OpenAI.BadRequestError);
      expect(openAiError({ error: err.error }).param, JSON.stringify(extra)).toBe(param);
    }
    await stillServes();
  });

  it("an unknown model is a 404 on both endpoints and on /v1/models/{id}", async () => {
    for (const call of [
      () => client.chat.completions.create(chat({ model: "gpt-9" }) as never),
      () => client.completions.create({ model: "gpt-9", prompt: "x" }),
      () => client.models.retrieve("gpt-9"),
    ]) {
      const err = await call().catch((e) => e);
      expect(err).toBeInstanceOf(OpenAI.NotFoundError);
      expect(openAiError({ error: err.error }).code).toBe("model_not_found");
    }
    await stillServes();
  });

  it("unknown routes are 404s, wrong methods 405s", async () => {
    const missing = await fetch(`${server.url}/v1/embeddings`, { method: "POST", body: "{}" });
    expect(missing.status).toBe(404);
    expect(openAiError(await missing.json()).code).toBe("unknown_url");
    const wrong = await fetch(`${server.url}/v1/completions`);
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toBe("POST");
    openAiError(await wrong.json());
    await stillServes();
  });

  it("a prompt longer than the context (or with max_tokens past it) is a 400 context_length_exceeded", async () => {
    const context = model.config.maxPositionEmbeddings;
    const ids = Array.from({ length: context + 10 }, (_, i) => 100 + (i % 800));
    const cases = [
      () => client.completions.create({ model: server.modelId, prompt: ids, max_tokens: 1 }),
      () => client.completions.create({ model: server.modelId, prompt: ids.slice(0, context - 5), max_tokens: 10 }),
      () => client.completions.create({ model: server.modelId, prompt: "word ".repeat(context + 10), max_tokens: 1 }),
      () => client.chat.completions.create(chat({ messages: [{ role: "user", content: "word ".repeat(context) }] }) as never),
    ];
    for (const call of cases) {
      const err = await call().catch((e) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(openAiError({ error: err.error }).code).toBe("context_length_exceeded");
    }
    // Exactly the context is fine.
    const fits = await client.completions.create({ model: server.modelId, prompt: ids.slice(0, context - 2), max_tokens: 2, temperature: 0 });
    expect(fits.usage!.prompt_tokens + fits.usage!.completion_tokens).toBe(context);
    await stillServes();
  });

  it("a body over the limit is a 413, told by Content-Length or found while reading", async () => {
    const huge = JSON.stringify(chat({ messages: [{ role: "user", content: "x".repeat(maxRequestBytes) }] }));
    const declared = await post("/v1/chat/completions", huge);
    expect(declared.status).toBe(413);
    expect(openAiError(declared.body).code).toBe("request_too_large");

    // Chunked, with no Content-Length: the server counts as it reads.
    const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const socket = net.connect(server.port, "127.0.0.1", () => {
        socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`);
        const piece = "x".repeat(16 * 1024);
        for (let i = 0; i < 8; i++) socket.write(`${piece.length.toString(16)}\r\n${piece}\r\n`);
        socket.write("0\r\n\r\n");
      });
      let text = "";
      socket.on("data", (d) => (text += d));
      socket.on("error", reject);
      socket.on("close", () => resolve({ status: Number(text.split(" ")[1]), body: text.slice(text.indexOf("\r\n\r\n") + 4) }));
    });
    expect(chunked.status).toBe(413);
    expect(openAiError(JSON.parse(chunked.body)).code).toBe("request_too_large");

    const viaClient = await client.chat.completions.create(chat({ messages: [{ role: "user", content: "y".repeat(2 * maxRequestBytes) }] }) as never).catch((e) => e);
    expect(viaClient.status).toBe(413);
    await stillServes();
  });

  it("survives broken HTTP and clients that vanish in the middle of a body", async () => {
    const raw = (bytes: string) =>
      new Promise<string>((resolve) => {
        const socket = net.connect(server.port, "127.0.0.1", () => socket.write(bytes));
        let text = "";
        socket.on("data", (d) => (text += d));
        socket.on("error", () => resolve(text));
        socket.on("close", () => resolve(text));
      });
    const garbage = await raw("HELLO / NONSENSE\r\n\r\n");
    expect(garbage).toMatch(/^HTTP\/1\.1 400 /);
    openAiError(JSON.parse(garbage.slice(garbage.indexOf("\r\n\r\n") + 4)));

    await new Promise<void>((resolve) => {
      const socket = net.connect(server.port, "127.0.0.1", () => {
        socket.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"model": "`);
        setTimeout(() => socket.destroy(), 50);
      });
      socket.on("close", () => resolve());
    });
    await stillServes();
    const health = (await (await fetch(`${server.url}/health`)).json()) as Health;
    expect(health.queue).toMatchObject({ running: 0, waiting: 0 });
  });

  it("logs every refused request with its status and error", () => {
    const statuses = log.map((line) => Number(line.split(" ")[3]));
    for (const status of [400, 404, 405, 413]) expect(statuses).toContain(status);
    const refused = log.filter((line) => Number(line.split(" ")[3]) >= 400);
    expect(refused.length).toBeGreaterThan(0);
    for (const line of refused) expect(line).toMatch(/error: "/);
  });
});
