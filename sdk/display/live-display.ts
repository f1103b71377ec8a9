// One output that changes in place (a token stream, a progress bar): shown on the first refresh,
// then updated at most once per interval. A refresh inside the interval schedules one trailing
// update, so the last state always appears; flush() sends it at once (at the end).
import { displayBridge, newDisplayId } from "./kernel";

export interface Renderable {
  toMimeBundle(): Record<string, unknown>;
}

export class LiveDisplay {
  readonly displayId: string;
  private shown = false;
  private lastSent = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly content: Renderable,
    kind: string,
    private readonly intervalMs = 30,
    displayId?: string,
  ) {
    this.displayId = displayId ?? newDisplayId(kind);
  }

  /** The content changed: show it now, or soon (within the interval). */
  refresh(): void {
    if (!displayBridge()) return;
    const wait = this.lastSent + this.intervalMs - performance.now();
    if (!this.shown || wait <= 0) return this.send();
    this.timer ??= setTimeout(() => this.send(), wait);
  }

  /** Shows the current content now. */
  flush(): void {
    if (displayBridge()) this.send();
  }

  private send(): void {
    const bridge = displayBridge();
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (!bridge) return;
    if (this.shown) bridge.updateDisplay(this.content, { displayId: this.displayId });
    else bridge.display(this.content, { displayId: this.displayId });
    this.shown = true;
    this.lastSent = performance.now();
  }
}
