// The kernel: binds the five Jupyter channels and answers every shell and control request as the
// messaging spec (5.3) says, publishing busy/idle around each and the cells' inputs and outputs.
import * as fs from "node:fs";
import * as path from "node:path";
import * as ts from "typescript";
import * as zmq from "zeromq";
import { packageRoot } from "../sdk/native";
import { installBridge, type DisplayOptions } from "./bridge";
import { endpoint, type ConnectionInfo } from "./connection";
import { refuseProcessExit } from "./exit-guard";
import { Executor, type TypeCheckMode } from "./executor";
import { Heartbeat } from "./heartbeat";
import { History } from "./history";
import { Iopub, type StreamName } from "./iopub";
import { toMimeBundle } from "./mime";
import { SocketWriter } from "./socket-writer";
import { decode, MessageFactory, PROTOCOL_VERSION, Signer, type Content, type Message } from "./wire";

export interface KernelOptions {
  /** The notebook's folder (default: the process's working directory). */
  cwd?: string;
  typecheck?: TypeCheckMode;
  /** Where the kernel's own diagnostics go (default: the process's stderr, i.e. the server log). */
  log?: (line: string) => void;
}

type RouterChannel = "shell" | "control";
type Handler = (request: Message, channel: RouterChannel) => Promise<void> | void;

// Jupyter counts cursor positions in Unicode code points, JavaScript strings in UTF-16 units.
function utf16Offset(text: string, codePoints: number): number {
  let offset = 0;
  for (let i = 0; i < codePoints && offset < text.length; i++) offset += text.codePointAt(offset)! > 0xffff ? 2 : 1;
  return offset;
}
const codePointOffset = (text: string, utf16: number) => [...text.slice(0, utf16)].length;

const VERSION = (JSON.parse(fs.readFileSync(path.join(packageRoot, "package.json"), "utf8")) as { version: string }).version;

export class Kernel {
  private readonly factory = new MessageFactory();
  private readonly signer: Signer;
  private readonly writers: Record<RouterChannel, SocketWriter>;
  private readonly iopub: Iopub;
  private readonly executor: Executor;
  private readonly history = new History();
  private readonly interruptHooks = new Set<() => void>();
  private readonly shellQueue: Message[] = [];
  private shellRunning = false;
  private executionCount = 0;
  private unstoredCells = 0;
  /** The request whose cell is running (or ran last): stray output is attributed to it. */
  private outputParent: Message | undefined;
  private closing: Promise<void> | undefined;
  private restoreProcessExit: (() => void) | undefined;
  private closedResolve!: () => void;
  /** Resolves when the kernel has shut down. */
  readonly closed = new Promise<void>((resolve) => (this.closedResolve = resolve));
  private readonly log: (line: string) => void;
  private readonly handlers: Record<string, Handler> = {
    kernel_info_request: (m, ch) => this.reply(ch, m, this.kernelInfo()),
    execute_request: (m, ch) => this.execute(m, ch),
    complete_request: (m, ch) => this.complete(m, ch),
    inspect_request: (m, ch) => this.inspect(m, ch),
    is_complete_request: (m, ch) => this.reply(ch, m, { ...this.executor.isComplete(String(m.content.code ?? "")) }),
    history_request: (m, ch) => this.reply(ch, m, { status: "ok", history: this.history.query(m.content) }),
    comm_info_request: (m, ch) => this.reply(ch, m, { status: "ok", comms: {} }),
    // No comm targets exist: close any comm a frontend opens, as the spec asks.
    comm_open: (m) => this.iopub.publish("comm_close", { comm_id: m.content.comm_id, data: {} }, m),
    comm_msg: () => undefined,
    comm_close: () => undefined,
    interrupt_request: (m, ch) => {
      this.interrupt();
      this.reply(ch, m, { status: "ok" });
    },
    shutdown_request: (m, ch) => this.shutdown(m, ch),
  };

  private constructor(
    private readonly sockets: { shell: zmq.Router; control: zmq.Router; stdin: zmq.Router; iopub: zmq.Publisher },
    private readonly heartbeat: Heartbeat,
    info: ConnectionInfo,
    options: KernelOptions,
  ) {
    this.log = options.log ?? ((line) => fs.writeSync(2, `[moelens kernel] ${line}\n`));
    this.signer = new Signer(info.key, info.signatureScheme);
    const onError = (channel: string) => (e: unknown, m: Message) =>
      this.log(`${channel}: could not send ${m.header.msg_type}: ${(e as Error).message}`);
    this.writers = {
      shell: new SocketWriter(sockets.shell, this.signer, onError("shell")),
      control: new SocketWriter(sockets.control, this.signer, onError("control")),
    };
    this.iopub = new Iopub(new SocketWriter(sockets.iopub, this.signer, onError("iopub")), this.factory);
    this.executor = new Executor({
      cwd: options.cwd ?? process.cwd(),
      typecheck: options.typecheck ?? "warn",
      onTypeErrors: (text) => this.iopub.stream("stderr", text, this.outputParent),
      beforeRun: () => this.iopub.drain(),
    });
  }

  /** Binds the channels of a connection file and starts serving. */
  static async start(info: ConnectionInfo, options: KernelOptions = {}): Promise<Kernel> {
    const sockets = {
      shell: new zmq.Router(),
      control: new zmq.Router(),
      stdin: new zmq.Router(),
      // Drop (rather than block on) a client that stopped reading, but only far beyond normal bursts.
      iopub: new zmq.Publisher({ sendHighWaterMark: 100_000 }),
    };
    for (const [channel, socket] of Object.entries(sockets)) {
      socket.linger = 1000;
      await socket.bind(endpoint(info, channel as keyof typeof sockets));
    }
    const heartbeat = await Heartbeat.start(endpoint(info, "hb"));
    const kernel = new Kernel(sockets, heartbeat, info, options);
    kernel.serve();
    return kernel;
  }

  private serve(): void {
    this.captureOutput();
    this.restoreProcessExit = refuseProcessExit();
    installBridge({
      display: (value, options) => this.display(value, options),
      updateDisplay: (value, options) => this.updateDisplay(value, options),
      clearOutput: (options) => this.iopub.publish("clear_output", { wait: options?.wait === true }, this.outputParent),
      onInterrupt: (hook) => {
        this.interruptHooks.add(hook);
        return () => this.interruptHooks.delete(hook);
      },
      mimeBundle: toMimeBundle,
    });
    process.on("SIGINT", () => this.interrupt());
    process.on("exit", () => this.heartbeat.closeSync());
    this.iopub.status("starting", undefined);
    void this.read("shell");
    void this.read("control");
    // Parse lib and package types while the frontend is still connecting.
    setTimeout(() => this.executor.warmUp(), 50);
  }

  // console.* and process.stdout/stderr writes from cells (and from anything else in the process)
  // become stream outputs of the current cell. Native code writing to fd 1 bypasses this.
  private captureOutput(): void {
    const capture = (stream: NodeJS.WriteStream, name: StreamName) => {
      stream.write = ((chunk: string | Uint8Array, encoding?: BufferEncoding | (() => void), callback?: () => void) => {
        const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString(typeof encoding === "string" ? encoding : "utf8");
        this.iopub.stream(name, text, this.outputParent);
        const done = typeof encoding === "function" ? encoding : callback;
        if (done) process.nextTick(done);
        return true;
      }) as typeof stream.write;
    };
    capture(process.stdout, "stdout");
    capture(process.stderr, "stderr");
    const stray = (what: string) => (error: unknown) => {
      const report = this.executor.describeError(error);
      this.iopub.stream("stderr", `${what}: ${report.traceback.join("\n")}\n`, this.outputParent);
    };
    process.on("uncaughtException", stray("Uncaught exception"));
    process.on("unhandledRejection", stray("Unhandled promise rejection"));
  }

  private async read(channel: RouterChannel): Promise<void> {
    try {
      for await (const frames of this.sockets[channel]) {
        let message: Message;
        try {
          message = decode(frames, this.signer);
        } catch (e) {
          this.log(`${channel}: dropped a message: ${(e as Error).message}`);
          continue;
        }
        if (channel === "control") {
          void this.dispatch(message, "control");
        } else {
          this.shellQueue.push(message);
          void this.runShellQueue();
        }
      }
    } catch (e) {
      if (!this.closing) this.log(`${channel}: ${(e as Error).message}`);
    }
  }

  // Shell requests run one at a time, in order; control requests (interrupt, shutdown) do not wait.
  private async runShellQueue(): Promise<void> {
    if (this.shellRunning) return;
    this.shellRunning = true;
    try {
      for (let m = this.shellQueue.shift(); m; m = this.shellQueue.shift()) await this.dispatch(m, "shell");
    } finally {
      this.shellRunning = false;
    }
  }

  private async dispatch(request: Message, channel: RouterChannel): Promise<void> {
    const handler = this.handlers[request.header.msg_type];
    if (!handler) {
      this.log(`${channel}: ignored unknown message type '${request.header.msg_type}'`);
      return;
    }
    this.iopub.status("busy", request);
    try {
      await handler(request, channel);
    } catch (e) {
      this.log(`${channel}: ${request.header.msg_type} failed: ${(e as Error).stack ?? e}`);
      if (request.header.msg_type.endsWith("_request")) this.reply(channel, request, { status: "error", ...this.executor.describeError(e) });
    } finally {
      this.iopub.status("idle", request);
    }
  }

  private reply(channel: RouterChannel, request: Message, content: Content): void {
    this.iopub.flushStreams();
    this.writers[channel].enqueue(this.factory.reply(request, content));
  }

  private kernelInfo(): Content {
    return {
      status: "ok",
      protocol_version: PROTOCOL_VERSION,
      implementation: "moelens",
      implementation_version: VERSION,
      language_info: {
        name: "typescript",
        version: ts.version,
        mimetype: "text/typescript",
        file_extension: ".ts",
        codemirror_mode: { name: "javascript", typescript: true },
        pygments_lexer: "typescript",
      },
      banner: `moelens ${VERSION}: TypeScript ${ts.version} on Node ${process.version}`,
      help_links: [],
      debugger: false,
    };
  }

  private async execute(request: Message, channel: RouterChannel): Promise<void> {
    const c = request.content as {
      code?: string;
      silent?: boolean;
      store_history?: boolean;
      user_expressions?: Record<string, string>;
      stop_on_error?: boolean;
    };
    const code = String(c.code ?? "");
    const silent = c.silent === true;
    const store = !silent && c.store_history !== false;
    if (store) this.executionCount++;
    const count = this.executionCount;
    if (!silent) this.iopub.publish("execute_input", { code, execution_count: count }, request);
    this.outputParent = request;
    const fileName = store ? `cell[${count}]` : `cell[~${++this.unstoredCells}]`;
    const outcome = await this.executor.execute(code, fileName);
    let output: string | null = null;
    if (outcome.status === "ok") {
      if (outcome.hasValue && outcome.value !== undefined && !silent) {
        try {
          const data = toMimeBundle(outcome.value);
          output = typeof data["text/plain"] === "string" ? data["text/plain"] : null;
          this.iopub.publish("execute_result", { execution_count: count, data, metadata: {} }, request);
        } catch (e) {
          this.iopub.stream("stderr", `cannot display the value: ${(e as Error).message}\n`, request);
        }
      }
      this.reply(channel, request, {
        status: "ok",
        execution_count: count,
        payload: [],
        user_expressions: this.userExpressions(c.user_expressions ?? {}),
      });
    } else {
      this.iopub.publish("error", { ...outcome.report }, request);
      this.reply(channel, request, { status: "error", execution_count: count, ...outcome.report });
      if (c.stop_on_error !== false) this.abortQueuedCells();
    }
    if (store) this.history.add(count, code, output);
  }

  private userExpressions(expressions: Record<string, string>): Content {
    const out: Content = {};
    for (const [name, expression] of Object.entries(expressions)) {
      try {
        out[name] = { status: "ok", data: toMimeBundle(this.executor.evaluate(expression)), metadata: {} };
      } catch (e) {
        out[name] = { status: "error", ...this.executor.describeError(e) };
      }
    }
    return out;
  }

  // After a failed cell, cells already queued behind it (a "run all") are not run: they likely
  // depend on it. A cell sent after the failure is reported runs normally.
  private abortQueuedCells(): void {
    const queued = this.shellQueue.filter((m) => m.header.msg_type === "execute_request");
    if (queued.length === 0) return;
    this.shellQueue.splice(0, this.shellQueue.length, ...this.shellQueue.filter((m) => !queued.includes(m)));
    for (const m of queued) {
      this.iopub.status("busy", m);
      this.reply("shell", m, {
        status: "error",
        execution_count: this.executionCount,
        ename: "CellNotRun",
        evalue: "not run: an earlier cell failed",
        traceback: [],
      });
      this.iopub.status("idle", m);
    }
  }

  private complete(request: Message, channel: RouterChannel): void {
    const code = String(request.content.code ?? "");
    const cursor = utf16Offset(code, Number(request.content.cursor_pos ?? code.length));
    const c = this.executor.complete(code, cursor);
    this.reply(channel, request, {
      status: "ok",
      matches: c.matches,
      cursor_start: codePointOffset(code, c.start),
      cursor_end: codePointOffset(code, c.end),
      metadata: {},
    });
  }

  private inspect(request: Message, channel: RouterChannel): void {
    const code = String(request.content.code ?? "");
    const cursor = utf16Offset(code, Number(request.content.cursor_pos ?? code.length));
    const text = this.executor.inspect(code, cursor);
    this.reply(channel, request, { status: "ok", found: text !== undefined, data: text ? { "text/plain": text } : {}, metadata: {} });
  }

  private display(value: unknown, options: DisplayOptions = {}): void {
    const transient = options.displayId !== undefined ? { display_id: String(options.displayId) } : {};
    this.iopub.publish("display_data", { data: toMimeBundle(value), metadata: options.metadata ?? {}, transient }, this.outputParent);
  }

  private updateDisplay(value: unknown, options: DisplayOptions & { displayId: string }): void {
    if (typeof options?.displayId !== "string") throw new TypeError("updateDisplay(value, { displayId }): displayId must be a string");
    const content = { data: toMimeBundle(value), metadata: options.metadata ?? {}, transient: { display_id: options.displayId } };
    this.iopub.updateDisplay(content, this.outputParent);
  }

  /** Runs the interrupt hooks (e.g. native cancellation) and abandons the running cell. */
  interrupt(): void {
    for (const hook of this.interruptHooks) {
      try {
        hook();
      } catch (e) {
        this.log(`interrupt hook failed: ${(e as Error).message}`);
      }
    }
    this.executor.interrupt();
  }

  private shutdown(request: Message, channel: RouterChannel): void {
    const restart = request.content.restart === true;
    this.reply(channel, request, { status: "ok", restart });
    this.iopub.publish("shutdown_reply", { status: "ok", restart }, request);
    // After dispatch publishes idle.
    setImmediate(() => void this.close());
  }

  /** Sends what is queued (for at most a second), closes the channels and resolves `closed`. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const drained = Promise.all([this.iopub.drain(), this.writers.shell.drain(), this.writers.control.drain()]);
      await Promise.race([drained, new Promise((r) => setTimeout(r, 1000))]);
      for (const socket of Object.values(this.sockets)) socket.close();
      this.heartbeat.closeSync();
      this.restoreProcessExit?.();
      this.closedResolve();
    })();
    return this.closing;
  }
}
