// Synchronous calls into HF `tokenizers` running in a worker thread.
//
// The `tokenizers` npm package only has Promise-returning encode/decode (they run on the libuv pool),
// but the SDK contract is `tok.encode(text): number[]`. A worker owns the tokenizer; the main thread
// posts a request, blocks on Atomics.wait until the worker flags its reply, then takes the reply with
// receiveMessageOnPort. One round trip costs about 0.2 ms.
import * as path from "node:path";
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from "node:worker_threads";

export interface AddedTokenInfo {
  id: number;
  content: string;
  special: boolean;
}

export interface WorkerReady {
  /** Highest id (base vocabulary and added tokens) + 1. */
  vocabSize: number;
  addedTokens: AddedTokenInfo[];
}

export type WorkerRequest =
  | { op: "encode"; text: string }
  | { op: "decode"; ids: number[]; skipSpecialTokens: boolean }
  | { op: "idToToken"; id: number }
  | { op: "tokenToId"; token: string };

export interface EncodeReply {
  ids: number[];
  tokens: string[];
  /** [start, end) in code points of the input (what Rust's char offsets count). */
  offsets: [number, number][];
}

// Plain JS run with `eval: true`, so it works the same from sources (tsx, vitest) and from dist/.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const fs = require("node:fs");
const { Tokenizer } = require(workerData.tokenizersModule);
const flag = new Int32Array(workerData.flag);
const port = workerData.port;
function signal() { Atomics.store(flag, 0, 1); Atomics.notify(flag, 0); }
process.on("exit", () => { Atomics.store(flag, 0, 2); Atomics.notify(flag, 0); });
let tok = null;
try {
  const text = fs.readFileSync(workerData.file, "utf8");
  const json = JSON.parse(text);
  tok = Tokenizer.fromString(text);
  const added = (json.added_tokens || []).map((t) => ({ id: t.id, content: t.content, special: !!t.special }));
  let maxId = -1;
  for (const id of Object.values((json.model && json.model.vocab) || {})) if (typeof id === "number" && id > maxId) maxId = id;
  for (const t of added) if (t.id > maxId) maxId = t.id;
  if (Array.isArray(json.model && json.model.vocab)) maxId = Math.max(maxId, json.model.vocab.length - 1);
  parentPort.postMessage({ ready: { vocabSize: maxId + 1, addedTokens: added } });
} catch (e) {
  parentPort.postMessage({ error: String(e && e.message || e) });
}
async function handle(m) {
  switch (m.op) {
    case "encode": {
      const e = await tok.encode(m.text, null, { addSpecialTokens: false });
      return { ids: e.getIds(), tokens: e.getTokens(), offsets: e.getOffsets() };
    }
    case "decode": return await tok.decode(m.ids, m.skipSpecialTokens);
    case "idToToken": return tok.idToToken(m.id);
    case "tokenToId": return tok.tokenToId(m.token);
    default: throw new Error("unknown request " + m.op);
  }
}
if (tok) port.on("message", async (m) => {
  let reply;
  try { reply = { value: await handle(m) }; } catch (e) { reply = { error: String(e && e.message || e) }; }
  port.postMessage(reply);
  signal();
});
`;

export class TokenizerWorker {
  private readonly flag: Int32Array;
  private closed = false;
  private failure: Error | undefined;

  private constructor(
    private readonly worker: Worker,
    private readonly port: MessagePort,
    flagBuffer: SharedArrayBuffer,
    readonly file: string,
  ) {
    this.flag = new Int32Array(flagBuffer);
    // A crash in the worker is reported by the next call (an 'error' event without a listener would throw).
    worker.on("error", (e) => (this.failure = e));
  }

  /** Starts a worker on tokenizer.json; resolves once it has parsed the file. */
  static async start(file: string): Promise<{ worker: TokenizerWorker; ready: WorkerReady }> {
    const flag = new SharedArrayBuffer(4);
    const { port1, port2 } = new MessageChannel();
    const thread = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { tokenizersModule: resolveTokenizersModule(), file, flag, port: port2 },
      transferList: [port2],
    });
    const ready = await new Promise<WorkerReady>((resolve, reject) => {
      thread.once("message", (m: { ready?: WorkerReady; error?: string }) => {
        if (m.ready) resolve(m.ready);
        else reject(new Error(`${file}: cannot load the tokenizer: ${m.error}`));
      });
      thread.once("error", (e) => reject(new Error(`${file}: tokenizer worker failed: ${e.message}`)));
      thread.once("exit", (code) => reject(new Error(`${file}: tokenizer worker exited (code ${code}) while loading`)));
    });
    thread.removeAllListeners("exit");
    thread.removeAllListeners("error");
    // Idle, the worker must not keep the process alive.
    thread.unref();
    port1.unref();
    return { worker: new TokenizerWorker(thread, port1, flag, file), ready };
  }

  /** Sends one request and blocks until the reply. */
  call<T>(request: WorkerRequest): T {
    if (this.closed) throw new Error(`${this.file}: tokenizer is closed`);
    Atomics.store(this.flag, 0, 0);
    this.port.postMessage(request);
    for (;;) {
      Atomics.wait(this.flag, 0, 0);
      const received = receiveMessageOnPort(this.port);
      if (received) {
        const reply = received.message as { value?: T; error?: string };
        if (reply.error !== undefined) throw new Error(`${this.file}: ${request.op} failed: ${reply.error}`);
        return reply.value as T;
      }
      if (Atomics.load(this.flag, 0) === 2) {
        this.closed = true;
        throw new Error(`${this.file}: the tokenizer worker has exited${this.failure ? `: ${this.failure.message}` : ""}`);
      }
    }
  }

  /** Stops the worker; later calls throw. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.port.close();
    void this.worker.terminate();
  }
}

// The worker runs as an eval'd script whose require() resolves from the cwd: hand it the absolute path.
function resolveTokenizersModule(): string {
  try {
    return require.resolve("tokenizers");
  } catch {
    throw new Error(
      `moelens: the 'tokenizers' package is not installed (looked from ${path.dirname(__filename)}); run \`npm install\``,
    );
  }
}
