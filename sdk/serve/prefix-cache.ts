// The prefix cache across requests. DeltaNet layers keep a running state that cannot be rewound, so a
// saved session can only continue a prompt that starts with its whole token history; the cache
// keeps sessions at the end of earlier prompts (and after earlier replies), and a request forks the
// longest one whose history is a strict prefix of its prompt (strict: the last prompt token must
// still be fed, for its logits). Bounded by entry count and by the sessions' native bytes; the least
// recently used entries go first, and every session the cache lets go of is disposed of at once.
import type { Session } from "../session";
import type { ExpertLoad } from "../trace/expert-load";

export interface PrefixCacheLimits {
  /** Most sessions kept (0 turns the cache off). */
  entries: number;
  /** Most bytes of session state kept (KV cache and DeltaNet state). */
  bytes: number;
}

export interface CacheEntry {
  readonly tokens: readonly number[];
  /** Holds exactly `tokens`; never fed again (requests fork it). */
  readonly session: Session;
  /** Expert load over `tokens`, when they were fed with router capture. */
  readonly load: ExpertLoad | undefined;
  readonly bytes: number;
}

export class PrefixCache {
  // Least recently used first.
  private entries: CacheEntry[] = [];

  constructor(readonly limits: PrefixCacheLimits) {}

  get enabled(): boolean {
    return this.limits.entries > 0;
  }

  get size(): number {
    return this.entries.length;
  }

  get bytes(): number {
    return this.entries.reduce((sum, e) => sum + e.bytes, 0);
  }

  /** The entry with the longest history that is a strict prefix of `prompt` (and passes `accept`). */
  lookup(prompt: readonly number[], accept: (e: CacheEntry) => boolean = () => true): CacheEntry | undefined {
    let best: CacheEntry | undefined;
    for (const e of this.entries) {
      if (e.tokens.length >= prompt.length || (best && e.tokens.length <= best.tokens.length) || !accept(e)) continue;
      if (isPrefix(e.tokens, prompt)) best = e;
    }
    if (best) this.touch(best);
    return best;
  }

  /**
   * Keeps `session` (which must hold exactly `tokens` and is not used again by the caller). An entry
   * with the same tokens is replaced, unless it has an expert load and the new one does not.
   */
  add(tokens: readonly number[], session: Session, load: ExpertLoad | undefined): void {
    if (session.position !== tokens.length) throw new Error(`prefix cache: the session holds ${session.position} tokens, not ${tokens.length}`);
    const bytes = session.memoryBytes;
    if (this.limits.entries === 0 || tokens.length === 0 || bytes > this.limits.bytes) return session.dispose();
    const same = this.entries.find((e) => e.tokens.length === tokens.length && isPrefix(e.tokens, tokens));
    if (same && same.load && !load) {
      this.touch(same);
      return session.dispose();
    }
    if (same) this.remove(same);
    this.entries.push({ tokens: [...tokens], session, load, bytes });
    while (this.entries.length > this.limits.entries || this.bytes > this.limits.bytes) this.remove(this.entries[0]);
  }

  clear(): void {
    while (this.entries.length > 0) this.remove(this.entries[0]);
  }

  private remove(e: CacheEntry): void {
    this.entries.splice(this.entries.indexOf(e), 1);
    e.session.dispose();
  }

  private touch(e: CacheEntry): void {
    this.entries.splice(this.entries.indexOf(e), 1);
    this.entries.push(e);
  }
}

function isPrefix(prefix: readonly number[], of: readonly number[]): boolean {
  if (prefix.length > of.length) return false;
  for (let i = 0; i < prefix.length; i++) if (prefix[i] !== of[i]) return false;
  return true;
}
