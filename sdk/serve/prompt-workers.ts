// A small pool of worker processes that render chat templates and tokenize prompts for the server, so
// that the event loop keeps streaming other clients' tokens while a long prompt is tokenized.
//
// Large tasks (LARGE_TASK_CHARS and above) run on at most `size - 1` workers at once: one worker is
// always left for short prompts, so a huge request delays no one else's first token. A worker that
// ran a large task is replaced by a fresh one. Processes rather than threads: tokenizing megabytes
// takes gigabytes of native memory, which the C allocator keeps after it is freed; only the end of
// the process gives it back to the system.
import { fork, type ChildProcess } from "node:child_process";
import * as path from "node:path";
import type { ChatMessage } from "../chat/message";
import type { ChatRenderOptions } from "../chat/template";
import { PROMPT_WORKER_DIR, type PromptReply, type PromptTask } from "./prompt-task";

/** Prompts of this many UTF-16 units or more count as large. */
export const LARGE_TASK_CHARS = 256 * 1024;

/** The chat template refused the conversation (its message says why). */
export class TemplateError extends Error {}

interface Pending {
  task: PromptTask;
  large: boolean;
  resolve: (ids: Uint32Array) => void;
  reject: (e: Error) => void;
}

/** What a slot holds while its worker is being replaced. */
const REPLACING: Pending = { task: { op: "encode", text: "" }, large: false, resolve: () => undefined, reject: () => undefined };

type Worker = ChildProcess;

interface Slot {
  worker: Worker;
  /** The task it runs, if any. */
  busy: Pending | undefined;
}

export class PromptWorkers {
  private readonly slots: Slot[] = [];
  private readonly waiting: Pending[] = [];
  private closed = false;

  private constructor(
    private readonly dir: string,
    readonly size: number,
  ) {}

  /** Starts `size` workers (at least 2) on the checkpoint folder's tokenizer; resolves once all have loaded it. */
  static async start(dir: string, size = 2): Promise<PromptWorkers> {
    if (!Number.isInteger(size) || size < 2) throw new RangeError(`PromptWorkers: size must be an integer >= 2, got ${size}`);
    const pool = new PromptWorkers(dir, size);
    try {
      const workers = await Promise.allSettled(Array.from({ length: size }, () => pool.spawn()));
      for (const w of workers) if (w.status === "fulfilled") pool.slots.push({ worker: w.value, busy: undefined });
      const failed = workers.find((w) => w.status === "rejected");
      if (failed) throw failed.reason;
    } catch (e) {
      await pool.close();
      throw e;
    }
    return pool;
  }

  /** Token ids of a raw prompt. */
  encode(text: string): Promise<Uint32Array> {
    return this.submit({ op: "encode", text }, text.length);
  }

  /** Token ids of `messages` rendered with the chat template; rejects with a TemplateError when the template refuses them. */
  chat(messages: ChatMessage[], options: ChatRenderOptions): Promise<Uint32Array> {
    return this.submit({ op: "chat", messages, options }, contentChars(messages));
  }

  /** Stops the workers; waiting and running tasks reject. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const stopped = new Error("the prompt workers are stopped");
    for (const p of this.waiting.splice(0)) p.reject(stopped);
    await Promise.all(
      this.slots.map(async (slot) => {
        slot.busy?.reject(stopped);
        slot.busy = undefined;
        await stop(slot.worker);
      }),
    );
  }

  private submit(task: PromptTask, chars: number): Promise<Uint32Array> {
    if (this.closed) return Promise.reject(new Error("the prompt workers are stopped"));
    if (this.slots.length === 0) return Promise.reject(new Error("no prompt worker is running (they could not be restarted)"));
    return new Promise((resolve, reject) => {
      this.waiting.push({ task, large: chars >= LARGE_TASK_CHARS, resolve, reject });
      this.dispatch();
    });
  }

  // Hands waiting tasks, in arrival order, to idle workers; a large task waits while it would take
  // the last worker left for short ones, and short tasks behind it go first.
  private dispatch(): void {
    for (let i = 0; i < this.waiting.length; ) {
      const idle = this.slots.find((s) => s.busy === undefined);
      if (!idle) return;
      const next = this.waiting[i];
      const largeRunning = this.slots.filter((s) => s.busy?.large).length;
      if (next.large && largeRunning >= Math.max(1, this.slots.length - 1)) {
        i++;
        continue;
      }
      this.waiting.splice(i, 1);
      this.runOn(idle, next);
    }
  }

  private runOn(slot: Slot, pending: Pending): void {
    slot.busy = pending;
    const worker = slot.worker;
    let finished = false;
    const finish = (settle: () => void, replace: boolean) => {
      if (finished) return;
      finished = true;
      worker.off("message", onMessage);
      worker.off("exit", onExit);
      settle();
      if (this.closed) return;
      if (!replace) {
        slot.busy = undefined;
        this.dispatch();
        return;
      }
      this.replace(slot, worker);
    };
    const onMessage = (reply: PromptReply) => {
      if ("ids" in reply) finish(() => pending.resolve(reply.ids), pending.large);
      else finish(() => pending.reject(reply.kind === "template" ? new TemplateError(reply.error) : new Error(reply.error)), pending.large);
    };
    const onExit = (code: number) => finish(() => pending.reject(new Error(`the prompt worker exited (code ${code})`)), true);
    worker.on("message", onMessage);
    worker.on("exit", onExit);
    worker.send(pending.task, (e) => e && finish(() => pending.reject(e), true));
  }

  // Stops a slot's worker and starts another in its place. Apart from runOn's closures, which hold the
  // finished task: its prompt and ids (megabytes) would stay in memory until the new worker is up.
  private replace(slot: Slot, worker: Worker): void {
    slot.busy = REPLACING;  // busy (not large) until the replacement is up
    void stop(worker);
    this.spawn().then(
      (fresh) => {
        if (this.closed) return void stop(fresh);
        slot.worker = fresh;
        slot.busy = undefined;
        this.dispatch();
      },
      (e: Error) => {
        // The tokenizer loaded before, so this is a lasting failure: drop the slot, and fail what
        // waits when no worker is left rather than let it hang.
        this.slots.splice(this.slots.indexOf(slot), 1);
        if (this.slots.length === 0) for (const p of this.waiting.splice(0)) p.reject(e);
        else this.dispatch();
      },
    );
  }

  private spawn(): Promise<Worker> {
    // The worker module sits beside this one: dist/*.js, or the TypeScript sources run through tsx
    // (tests and scripts that import the sources).
    const ext = path.extname(__filename);
    const worker = fork(path.join(__dirname, `prompt-worker${ext}`), [], {
      env: { ...process.env, [PROMPT_WORKER_DIR]: this.dir },
      execArgv: ext === ".ts" ? ["--require", require.resolve("tsx/cjs")] : [],
      serialization: "advanced",
      stdio: ["ignore", "ignore", "inherit", "ipc"],
    });
    return new Promise((resolve, reject) => {
      const settle = () => {
        worker.off("message", onReady);
        worker.off("error", fail);
        worker.off("exit", onExit);
      };
      const fail = (e: Error) => {
        settle();
        void stop(worker);
        reject(new Error(`${path.join(this.dir, "tokenizer.json")}: the prompt worker failed to start: ${e.message}`));
      };
      const onExit = (code: number) => fail(new Error(`exited with code ${code}`));
      const onReady = () => {
        settle();
        // A crash later is seen through 'exit'; an 'error' without a listener would throw here.
        worker.on("error", () => undefined);
        // Idle workers must not keep the server's process alive.
        worker.unref();
        worker.channel?.unref();
        resolve(worker);
      };
      worker.once("message", onReady);
      worker.once("error", fail);
      worker.once("exit", onExit);
    });
  }
}

function stop(worker: Worker): Promise<void> {
  if (worker.exitCode !== null || worker.signalCode !== null) return Promise.resolve();
  const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
  // Held while it stops: otherwise a process with nothing else to do would exit before 'exit' comes.
  worker.ref();
  worker.kill();
  return exited;
}

// The size of a conversation's text, to tell large tasks from short ones.
function contentChars(messages: ChatMessage[]): number {
  let chars = 0;
  for (const m of messages) {
    for (const value of Object.values(m)) {
      if (typeof value === "string") chars += value.length;
      else if (value !== null && typeof value === "object") chars += JSON.stringify(value).length;
    }
  }
  return chars;
}
