// The iopub channel: status, inputs, outputs. Stream text is coalesced (one message per ~30 ms, or
// per 64 KiB) so a cell printing 10,000 lines sends a handful of messages; any other output first
// flushes the pending text, so the client sees everything in the order the cell produced it.
import type { SocketWriter } from "./socket-writer";
import type { Content, Message, MessageFactory } from "./wire";

export type StreamName = "stdout" | "stderr";

const FLUSH_DELAY_MS = 30;
const FLUSH_BYTES = 64 * 1024;

interface PendingStream {
  name: StreamName;
  parent: Message | undefined;
  chunks: string[];
  length: number;
}

export class Iopub {
  private pending: PendingStream[] = [];
  private pendingLength = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly writer: SocketWriter,
    private readonly factory: MessageFactory,
  ) {}

  publish(msgType: string, content: Content, parent: Message | undefined, metadata?: Content): void {
    this.flushStreams();
    this.writer.enqueue(this.factory.make(msgType, content, parent, { identities: [Buffer.from(msgType)], metadata }));
  }

  status(state: "starting" | "busy" | "idle", parent: Message | undefined): void {
    this.publish("status", { execution_state: state }, parent);
  }

  /**
   * A display update. If an update of the same display is still queued, it is replaced instead:
   * only the latest state matters, and a cell updating faster than the client reads stays fast.
   */
  updateDisplay(content: Content & { transient: { display_id: string } }, parent: Message | undefined): void {
    this.flushStreams();
    const id = content.transient.display_id;
    const replaced = this.writer.replaceQueued(
      (m) =>
        m.header.msg_type === "update_display_data" &&
        (m.content.transient as { display_id?: string } | undefined)?.display_id === id,
      content,
    );
    if (!replaced) this.publish("update_display_data", content, parent);
  }

  /** Appends text to a stream; it is sent within ~30 ms. */
  stream(name: StreamName, text: string, parent: Message | undefined): void {
    if (text === "") return;
    const last = this.pending[this.pending.length - 1];
    if (last && last.name === name && last.parent === parent) {
      last.chunks.push(text);
      last.length += text.length;
    } else {
      this.pending.push({ name, parent, chunks: [text], length: text.length });
    }
    this.pendingLength += text.length;
    if (this.pendingLength >= FLUSH_BYTES) this.flushStreams();
    else this.timer ??= setTimeout(() => this.flushStreams(), FLUSH_DELAY_MS);
  }

  /** Queues the pending stream text now. */
  flushStreams(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const pending = this.pending;
    this.pending = [];
    this.pendingLength = 0;
    for (const p of pending) {
      const content = { name: p.name, text: p.chunks.join("") };
      this.writer.enqueue(this.factory.make("stream", content, p.parent, { identities: [Buffer.from("stream")] }));
    }
  }

  /** Flushes streams and waits until everything queued is sent. */
  async drain(): Promise<void> {
    this.flushStreams();
    await this.writer.drain();
  }
}
