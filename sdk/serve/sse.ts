// Server-sent events as OpenAI streams them: `data: {json}` events, then `data: [DONE]`. Writes do not
// wait for slow readers (the engine must not stall for one client); a generation is bounded by its
// max_tokens, so what a slow client leaves buffered is too.
import type { ServerResponse } from "node:http";

export class SseStream {
  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache",
      Connection: "keep-alive",
      "X-Accel-Buffering": "no", // tell reverse proxies not to hold events back
    });
    res.flushHeaders();
  }

  /** False once the client has gone. */
  get open(): boolean {
    return !this.res.destroyed && !this.res.writableEnded;
  }

  send(data: unknown): void {
    if (this.open) this.res.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  /** Ends the stream with `data: [DONE]`. */
  done(): void {
    if (this.open) this.res.end("data: [DONE]\n\n");
  }

  /** Ends the stream with an error event (the status line was already sent). */
  fail(error: unknown): void {
    if (!this.open) return;
    this.send(error);
    this.res.end();
  }
}
