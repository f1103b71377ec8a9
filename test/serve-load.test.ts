// Load on the server, over loopback: 50 concurrent streaming clients get the text one client gets for
// the same seed; clients that disconnect (waiting or mid-stream) free their place and stop their
// generation; memory comes back to its baseline after rounds of load.
import * as v8 from "node:v8";
import * as vm from "node:vm";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load, type Model } from "moelens";
import { serve, type MoelensServer } from "../sdk/serve/server";
import type { Health } from "../sdk/serve/routes";
import { makeTextModelDir } from "./fixtures/t1-tokenizer/model-dir";

v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;

const fixture = makeTextModelDir();
let model: Model;
let server: MoelensServer;
let client: OpenAI;
const log: string[] = [];
const clients = 50;

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

const health = async (s: MoelensServer) => (await (await fetch(`${s.url}/health`)).json()) as Health;

/** One streaming chat request with seeded sampling; its whole text. */
async function streamedText(c: OpenAI = client): Promise<string> {
  const stream = await c.chat.completions.create({
    model: server.modelId,
    messages: [{ role: "user", content: "Tell me about the jury" }],
    temperature: 1,
    top_p: 0.9,
    seed: 42,
    max_tokens: 16,
    stream: true,
  });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
  return text;
}

const round = () => Promise.all(Array.from({ length: clients }, () => streamedText()));

describe("moelens serve under load", () => {
  it(`${clients} concurrent streaming clients all get the single client's text for the same seed`, async () => {
    const single = await streamedText();
    expect(single.length).toBeGreaterThan(0);
    const texts = await round();
    expect(texts).toHaveLength(clients);
    for (const t of texts) expect(t).toBe(single);
    const lines = log.slice(-clients);
    expect(lines.every((l) => / 200 prompt=\d+ cached=\d+ completion=16 finish=length /.test(l))).toBe(true);
    expect(await health(server)).toMatchObject({ queue: { running: 0, waiting: 0 } });
  });

  it("clients that disconnect, waiting or mid-stream, free their place and stop their generation", async () => {
    const lines: string[] = [];
    const small = await serve(model, { port: 0, maxQueue: 2, modelId: server.modelId, log: (l) => lines.push(l) });
    const c = new OpenAI({ baseURL: `${small.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const request = (maxTokens: number, signal?: AbortSignal) =>
      c.completions.create(
        { model: small.modelId, prompt: "The jury said", temperature: 0, max_tokens: maxTokens, ignore_eos: true, stream: true } as OpenAI.CompletionCreateParamsStreaming,
        { signal },
      );
    const drain = async (s: AsyncIterable<OpenAI.Completion>) => {
      let finish;
      for await (const chunk of s) finish = chunk.choices[0]?.finish_reason ?? finish;
      return finish;
    };
    try {
      // A long generation holds the engine; two more wait (their SSE headers came at once).
      const longAbort = new AbortController();
      const long = await request(4000, longAbort.signal);
      const longChunks = long[Symbol.asyncIterator]();
      await longChunks.next();
      const firstAbort = new AbortController();
      const first = await request(5, firstAbort.signal);
      const second = await request(5);
      expect(await health(small)).toMatchObject({ queue: { running: 1, waiting: 2, max_waiting: 2 } });

      // Full: 503 with Retry-After.
      const full = await c.completions.create({ model: small.modelId, prompt: "x", max_tokens: 1 }).catch((e) => e);
      expect(full).toBeInstanceOf(OpenAI.InternalServerError);
      expect(full.status).toBe(503);
      expect(full.headers.get("retry-after")).toMatch(/^[1-9]\d*$/);
      expect(full.error).toMatchObject({ type: "server_error", code: "queue_full" });

      // A waiting client leaves: its place is free for another.
      // (The openai client ends an aborted stream quietly, with no finish_reason.)
      firstAbort.abort();
      expect(await drain(first)).toBeUndefined();
      for (let i = 0; i < 100 && (await health(small)).queue.waiting !== 1; i++) await new Promise((r) => setTimeout(r, 10));
      expect((await health(small)).queue.waiting).toBe(1);
      const third = c.completions.create({ model: small.modelId, prompt: "The jury said", temperature: 0, max_tokens: 5 });

      // The running client leaves mid-stream: its generation stops and the others run.
      longAbort.abort();
      expect(await drain({ [Symbol.asyncIterator]: () => longChunks })).toBeUndefined();
      expect(await drain(second)).toBe("length");
      expect((await third).usage!.completion_tokens).toBe(5);
      expect(await health(small)).toMatchObject({ queue: { running: 0, waiting: 0 } });

      await new Promise((r) => setTimeout(r, 50));
      const longLine = lines.find((l) => /client-closed .*finish=abort/.test(l));
      expect(longLine, lines.join("\n")).toBeDefined();
      expect(Number(/completion=(\d+)/.exec(longLine!)![1])).toBeLessThan(4000);
      expect(lines.filter((l) => / 503 /.test(l))).toHaveLength(1);
      const closed = lines.filter((l) => /client-closed/.test(l));
      expect(closed).toHaveLength(2); // the long one and the waiting one
      expect(closed.some((l) => / 200 client-closed \d+ ms$/.test(l))).toBe(true); // left while waiting: no generation, no error
    } finally {
      await small.close();
    }
  });

  it("memory returns to its baseline after rounds of load", async () => {
    await round(); // the first round of this test fills caches and JIT code
    gc();
    gc();
    const baseline = process.memoryUsage();
    for (let i = 0; i < 3; i++) await round();
    gc();
    gc();
    const after = process.memoryUsage();
    const MiB = 2 ** 20;
    // A session kept per request would be 150 x ~0.5 MiB of native state here; JS kept per
    // request (chunks, histories) would show in the heap.
    expect((after.rss - baseline.rss) / MiB).toBeLessThan(32);
    expect((after.heapUsed - baseline.heapUsed) / MiB).toBeLessThan(4);
    const h = await health(server);
    expect(h.queue).toMatchObject({ running: 0, waiting: 0 });
    expect(h.prefix_cache.entries).toBeLessThanOrEqual(h.prefix_cache.max_entries);
    expect(h.prefix_cache.bytes).toBeLessThanOrEqual(h.prefix_cache.max_bytes);
  });
});
