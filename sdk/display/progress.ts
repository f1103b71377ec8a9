// A progress bar that updates in place in a notebook (at most every ~30 ms): model loading, a long
// text fed in chunks. `update` is bound, so it can be passed as a callback:
//
//   const model = await load(dir, { onProgress: new ProgressBar("Loading").update });
//
// Outside Jupyter it only records the numbers.
import { escapeHtml } from "./html";
import { LiveDisplay } from "./live-display";

export class ProgressBar {
  done = 0;
  total: number;
  private readonly live: LiveDisplay;
  private readonly started = performance.now();
  private finishedAt: number | undefined;

  constructor(
    readonly label: string,
    total = 0,
  ) {
    this.total = total;
    this.live = new LiveDisplay(this, "progress");
  }

  /** Sets the progress (and the total, when given); complete when done reaches the total. */
  readonly update = (done: number, total: number = this.total): void => {
    if (!Number.isFinite(done) || !Number.isFinite(total) || done < 0 || total < 0) {
      throw new RangeError(`ProgressBar "${this.label}": progress ${done}/${total} is not two numbers >= 0`);
    }
    this.done = done;
    this.total = total;
    if (total > 0 && done >= total) {
      this.finishedAt ??= performance.now();
      this.live.flush();
    } else {
      this.live.refresh();
    }
  };

  get fraction(): number {
    return this.total > 0 ? Math.min(1, this.done / this.total) : 0;
  }

  toMimeBundle(): Record<string, unknown> {
    const percent = (this.fraction * 100).toFixed(0);
    const elapsed = ((this.finishedAt ?? performance.now()) - this.started) / 1000;
    const status = `${this.done}/${this.total}${this.finishedAt !== undefined ? ` · ${elapsed.toFixed(2)} s` : ""}`;
    const width = 30;
    const filled = Math.round(this.fraction * width);
    return {
      "text/html":
        `<div class="moelens-progress" style="font-size: 12px; display: flex; align-items: center; gap: 8px;">` +
        `<span>${escapeHtml(this.label)}</span>` +
        `<div style="width: 240px; height: 10px; background: #e5e5e5; border-radius: 5px; overflow: hidden;">` +
        `<div style="width: ${percent}%; height: 100%; background: #4c78a8;"></div></div>` +
        `<span style="font-variant-numeric: tabular-nums;">${percent}% · ${status}</span></div>`,
      "text/plain": `${this.label} [${"#".repeat(filled)}${" ".repeat(width - filled)}] ${percent}% ${status}`,
    };
  }
}
