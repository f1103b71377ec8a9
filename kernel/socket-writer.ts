// One writer per zeromq socket. zeromq v6 allows a single send in flight per socket (a second one
// throws EBUSY, which is how tslab stalls after ~500 outputs), so every message goes through this
// queue and each send is awaited before the next.
import { encode, type Message, type Signer } from "./wire";

export interface SendableSocket {
  send(frames: Buffer[]): Promise<void>;
}

export class SocketWriter {
  private readonly queue: Message[] = [];
  private pumping: Promise<void> | undefined;

  constructor(
    private readonly socket: SendableSocket,
    private readonly signer: Signer,
    private readonly onError: (error: unknown, message: Message) => void,
  ) {}

  /** Queues a message; it is signed and sent after every message queued before it. */
  enqueue(message: Message): void {
    this.queue.push(message);
    this.pumping ??= this.pump();
  }

  /**
   * Replaces the content of a message that is queued and not sent yet, if `matches` finds one
   * (newest first). Used to keep only the latest state of a display that is updated faster than
   * the client reads.
   */
  replaceQueued(matches: (queued: Message) => boolean, content: Message["content"]): boolean {
    for (let i = this.queue.length - 1; i >= 0; i--) {
      if (matches(this.queue[i])) {
        this.queue[i].content = content;
        return true;
      }
    }
    return false;
  }

  /** Resolves once everything queued so far has been handed to zeromq. */
  async drain(): Promise<void> {
    while (this.pumping) await this.pumping;
  }

  private async pump(): Promise<void> {
    try {
      for (let message = this.queue.shift(); message; message = this.queue.shift()) {
        try {
          await this.socket.send(encode(message, this.signer));
        } catch (e) {
          this.onError(e, message);
        }
      }
    } finally {
      this.pumping = undefined;
    }
  }
}
