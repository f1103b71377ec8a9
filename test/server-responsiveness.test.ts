// A huge or slow request does not stall the others: prompts are tokenized in worker processes, bodies
// over the limit are refused while they stream in, and a 5 MB prompt leaves nothing behind.
import * as fs from "node:fs";
import * as net from "node:net";
import * as v8 from "node:v8";
import * as vm from "node:vm";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load, type Model } from "moelens";
import { serve, type MoelensServer } from "../sdk/serve/server";
import { makeTextModelDir } from "./fixtures/t1-tokenizer/model-dir";

v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;

const fixture = makeTextModelDir();
let model: Model;
let server: MoelensServer;
let client: OpenAI;
const maxRequestBytes = 8 * 2 ** 20;

beforeAll(async () => {
  model = await load(fixture.dir, { threads: 1 });
  server = await serve(model, { port: 0, maxRequestBytes, log: () => undefined });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(async () => {
  await server?.close();
  model?.tokenizer?.close();
  fixture.remove();
});

/** Milliseconds from sending a short streaming chat request to its first token. */
async function firstTokenMs(): Promise<number> {
  const start = performance.now();
  const stream = await client.chat.completions.create({
    model: server.modelId,
    messages: [{ role: "user", content: "Tell me about the jury" }],
    max_tokens: 4,
    temperature: 0,
    stream: true,
  });
  let first: number | undefined;
  for await (const chunk of stream) if (first === undefined && chunk.choices[0]?.delta.content) first = performance.now() - start;
  expect(first).toBeDefined();
  return first!;
}

const streams = 20;
const shortRound = async () => (await Promise.all(Array.from({ length: streams }, firstTokenMs))).sort((a, b) => a - b);

/** A chat request of `bytes` bytes of prose, sent with fetch; resolves with its status, body and end time. */
function hugeChat(bytes: number): Promise<{ status: number; body: string; endedAt: number }> {
  const words = "the jury said that the city of Atlanta had a good election . ";
  const content = words.repeat(Math.ceil(bytes / words.length)).slice(0, bytes);
  const body = JSON.stringify({ model: server.modelId, messages: [{ role: "user", content }], max_tokens: 1, stream: true });
  return fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body }).then(
    async (r) => ({ status: r.status, body: await r.text(), endedAt: performance.now() }),
  );
}

/** MiB of memory held by JavaScript values (the V8 heap in use and array buffers), after two garbage collections. */
function heldByValuesMiB(): number {
  gc();
  gc();
  const m = process.memoryUsage();
  return (m.heapUsed + m.arrayBuffers) / 2 ** 20;
}

/** MiB resident in each of this process's children: the server's prompt workers. */
function workersResidentMiB(): number[] {
  const mib: number[] = [];
  for (const pid of fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    let stat: string;
    let status: string;
    try {
      stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    // The parent pid is the second field after the parenthesised command name.
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (ppid === process.pid) mib.push(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024);
  }
  return mib;
}

describe("moelens serve stays responsive", () => {
  it(`while one client sends a 5 MB prompt, ${streams} concurrent short streams get their first token within 2 s of their time alone`, async () => {
    await shortRound(); // warms the workers, the prefix cache and the JIT
    const alone = await shortRound();
    const huge = hugeChat(5_000_000);
    // Let the body arrive and its tokenization start.
    await new Promise((r) => setTimeout(r, 300));
    const loaded = await shortRound();
    const roundEnded = performance.now();
    const answer = await huge;
    for (let i = 0; i < streams; i++) expect(loaded[i], `stream ${i}: alone ${alone[i].toFixed(0)} ms, loaded ${loaded[i].toFixed(0)} ms`).toBeLessThan(alone[i] + 2000);
    // The 5 MB prompt was tokenized whole (and is far past the context) while the short ones ran.
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body).error).toMatchObject({ code: "context_length_exceeded", param: "messages" });
    expect(JSON.parse(answer.body).error.message).toMatch(/the prompt has \d{7} tokens/);
    expect(answer.endedAt).toBeGreaterThan(roundEnded);
  }, 300_000);

  // The server's resident memory as a whole is no measure of this: V8 grows and shrinks its heap's
  // pages by tens of MiB from one collection to the next. What a 5 MB prompt could leave behind is its
  // text and token ids (JavaScript values) and the tokenizer's native memory (in a prompt worker).
  it("a 5 MB prompt leaves neither its text and ids in the server nor the tokenizer's memory in the workers", async () => {
    const hugeThenShort = async () => {
      const answer = await hugeChat(5_000_000);
      expect(answer.status).toBe(400);
      await shortRound();
      // The worker that tokenized it is replaced: wait for the old one to exit.
      for (let waited = 0; workersResidentMiB().length > 2 && waited < 20_000; waited += 100) await new Promise((r) => setTimeout(r, 100));
    };
    await shortRound();
    const values = heldByValuesMiB();
    const workers = Math.max(...workersResidentMiB());
    expect(workers).toBeGreaterThan(0);
    for (let i = 1; i <= 3; i++) {
      await hugeThenShort();
      const nowValues = heldByValuesMiB();
      expect(nowValues, `after ${i}: values held ${values.toFixed(1)} MiB before, ${nowValues.toFixed(1)} MiB after`).toBeLessThan(values * 1.1);
      // A worker that kept what tokenizing 5 MB took would hold several times a fresh one (about 8x
      // here); a worker's own use moves by tens of MiB as it serves short prompts.
      const nowWorkers = workersResidentMiB();
      expect(nowWorkers.length).toBe(2);
      expect(Math.max(...nowWorkers), `after ${i}: largest worker ${workers.toFixed(0)} MiB before, now ${nowWorkers.map((w) => w.toFixed(0)).join(" and ")} MiB`).toBeLessThan(2 * workers);
    }
    expect(server.engine.queue.running + server.engine.queue.queued).toBe(0);
  }, 300_000);

  it("a body over the limit gets a 413 with a JSON error while it is still streaming in", async () => {
    const limit = 1 << 20;
    const small = await serve(model, { port: 0, maxRequestBytes: limit, modelId: server.modelId, log: () => undefined });
    try {
      const chunk = Buffer.alloc(256 * 1024, "a");
      const total = 256 * chunk.length; // 64 MiB, far more than is ever read
      const { status, body, sent } = await new Promise<{ status: number; body: string; sent: number }>((resolve) => {
        const socket = net.connect(small.port, "127.0.0.1");
        let sent = 0;
        let reply = "";
        let stop = false;
        // The server closes the connection after its answer: later writes fail, which is expected.
        socket.on("error", () => (stop = true));
        socket.on("data", (d) => {
          reply += d;
          stop = true;
        });
        socket.on("close", () => {
          const [head, ...rest] = reply.split("\r\n\r\n");
          resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1]), body: rest.join("\r\n\r\n"), sent });
        });
        socket.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`);
        const write = () => {
          if (stop || sent >= total || socket.destroyed) return void socket.end();
          sent += chunk.length;
          socket.write(`${chunk.length.toString(16)}\r\n`);
          socket.write(chunk);
          socket.write("\r\n", (e) => (e ? socket.end() : setTimeout(write, 20)));
        };
        write();
      });
      expect(status).toBe(413);
      expect(JSON.parse(body)).toMatchObject({
        error: { code: "request_too_large", type: "invalid_request_error" },
      });
      // Refused after about the limit, long before the 64 MiB were sent.
      expect(sent).toBeLessThan(8 * limit);
      // The server still answers.
      const r = await fetch(`${small.url}/health`);
      expect(r.status).toBe(200);
    } finally {
      await small.close();
    }
  }, 120_000);
});
