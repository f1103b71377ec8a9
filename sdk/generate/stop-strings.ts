// Cuts generated text at the first stop string. Text that could be the start of a stop string is
// held back until the next piece shows whether it is one.

export class StopStrings {
  private held = "";

  constructor(private readonly stops: readonly string[]) {
    for (const s of stops) {
      if (typeof s !== "string" || s.length === 0) throw new RangeError(`stop strings must be non-empty strings, got ${JSON.stringify(s)}`);
    }
  }

  /** Adds generated text; returns what can be shown now, and whether a stop string was reached. */
  push(text: string): { text: string; stopped: boolean } {
    const all = this.held + text;
    let cut = -1;
    for (const s of this.stops) {
      const at = all.indexOf(s);
      if (at >= 0 && (cut < 0 || at < cut)) cut = at;
    }
    if (cut >= 0) {
      this.held = "";
      return { text: all.slice(0, cut), stopped: true };
    }
    const keep = this.partialMatchLength(all);
    this.held = all.slice(all.length - keep);
    return { text: all.slice(0, all.length - keep), stopped: false };
  }

  /** The held-back text, once generation ended without a stop string. */
  flush(): string {
    const rest = this.held;
    this.held = "";
    return rest;
  }

  // Length of the longest end of `text` that is a proper start of some stop string.
  private partialMatchLength(text: string): number {
    let best = 0;
    for (const s of this.stops) {
      for (let n = Math.min(s.length - 1, text.length); n > best; n--) {
        if (text.endsWith(s.slice(0, n))) {
          best = n;
          break;
        }
      }
    }
    return best;
  }
}
