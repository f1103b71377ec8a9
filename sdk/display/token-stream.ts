// A token stream shown live in a notebook: one output updated in place (at most every ~30 ms), with
// each piece of text optionally colored by the top-1 expert that processed its token in one layer.
//
//   const stream = new TokenStream({ colorBy: "expert", layer: 7 });
//   for await (const chunk of s.generate("The jury said", { maxTokens: 50 })) stream.push(chunk);
//
// Outside Jupyter it only collects the text (`stream.text`).
import { expertBackground } from "../plot/colors";
import { topExpert } from "../plot/top-expert";
import type { RouterTrace } from "../trace/router";
import { escapeHtml } from "./html";
import { LiveDisplay } from "./live-display";

/** A piece of generated text: a GenerateChunk, a decode step's text with its router trace, or a string. */
export interface StreamPiece {
  text: string;
  tokens?: readonly number[];
  /** Routing of the piece's tokens (e.g. a decode result's `router`); its last token colors the piece. */
  router?: RouterTrace;
  finishReason?: string;
}

export interface TokenStreamOptions {
  /** "plain" (default) or "expert": the background is the top-1 expert of `layer` (needs `router` on pieces). */
  colorBy?: "plain" | "expert";
  /** Model layer whose routing colors the text (default: the last layer). */
  layer?: number;
  /** Minimum time between two display updates (default 30 ms). */
  intervalMs?: number;
  /** The display to update (default: a new one). */
  displayId?: string;
}

interface Segment {
  text: string;
  expert?: number;
}

export class TokenStream {
  private readonly segments: Segment[] = [];
  private readonly live: LiveDisplay;
  private tokenCount = 0;
  private readonly started = performance.now();
  private finished: string | undefined;

  constructor(private readonly options: TokenStreamOptions = {}) {
    if (options.colorBy !== undefined && options.colorBy !== "plain" && options.colorBy !== "expert") {
      throw new RangeError(`TokenStream: colorBy must be "plain" or "expert", got ${JSON.stringify(options.colorBy)}`);
    }
    this.live = new LiveDisplay(this, "tokens", options.intervalMs ?? 30, options.displayId);
  }

  get displayId(): string {
    return this.live.displayId;
  }

  /** Everything pushed so far. */
  get text(): string {
    return this.segments.map((s) => s.text).join("");
  }

  /** Adds text; the display shows it within the interval (at once when the piece finishes generation). */
  push(piece: StreamPiece | string): void {
    const p = typeof piece === "string" ? { text: piece } : piece;
    this.tokenCount += p.tokens?.length ?? (p.router ? p.router.tokens : 0);
    if (p.text) this.segments.push({ text: p.text, expert: this.expertOf(p.router) });
    if (p.finishReason !== undefined) {
      this.finished = p.finishReason;
      this.live.flush();
    } else {
      this.live.refresh();
    }
  }

  /** Shows the final state now (call after the loop when no piece carried a finish reason). */
  end(): void {
    this.finished ??= "done";
    this.live.flush();
  }

  private expertOf(router: RouterTrace | undefined): number | undefined {
    if (this.options.colorBy !== "expert" || !router || router.tokens === 0) return undefined;
    const layer = this.options.layer ?? router.layers - 1;
    if (!Number.isInteger(layer) || layer < 0 || layer >= router.layers) {
      throw new RangeError(`TokenStream: layer ${layer} is outside [0, ${router.layers})`);
    }
    return topExpert(router, layer, router.tokens - 1);
  }

  toMimeBundle(): Record<string, unknown> {
    const spans = this.segments
      .map((s) =>
        s.expert === undefined
          ? escapeHtml(s.text)
          : `<span style="background: ${expertBackground(s.expert)}; border-radius: 2px;" title="expert ${s.expert}">${escapeHtml(s.text)}</span>`,
      )
      .join("");
    const seconds = (performance.now() - this.started) / 1000;
    const rate = this.tokenCount > 0 && seconds > 0 ? ` · ${(this.tokenCount / seconds).toFixed(1)} tokens/s` : "";
    const layer = this.options.colorBy === "expert" ? ` · colored by the top-1 expert of layer ${this.options.layer ?? "last"} (hover for its id)` : "";
    const status = `${this.tokenCount} tokens${rate}${layer}${this.finished ? ` · ${escapeHtml(this.finished)}` : " · …"}`;
    return {
      "text/html": `<div class="moelens-token-stream"><div style="white-space: pre-wrap; font-family: ui-monospace, monospace; line-height: 1.6;">${spans}</div><div style="color: #888; font-size: 11px;">${status}</div></div>`,
      "text/plain": this.text,
    };
  }
}
