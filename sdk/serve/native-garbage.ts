// Frees the native memory of sessions the server dropped. A session's state (KV cache, DeltaNet
// state) lives in C++ and goes only when V8 collects its small JS wrapper; V8 does not know how big
// that state is, so a busy server could pile up gigabytes of dropped forks before a collection
// comes. Until sessions can be disposed of explicitly, the server counts what it drops and runs a
// full collection between requests once that passes a threshold.
import * as v8 from "node:v8";
import * as vm from "node:vm";
import { stateMemory } from "../cli/parameters";
import type { ModelConfig } from "../config";

/**
 * Estimated bytes of a session holding `tokens` tokens: DeltaNet state plus the KV cache, which grows
 * in powers of two from 256 tokens up to the context (native/core/session.cpp; a fork copies the
 * whole capacity). Work buffers of sessions that ran a forward pass come on top.
 */
export function sessionBytes(config: ModelConfig, tokens: number): number {
  const m = stateMemory(config);
  let capacity = 256;
  while (capacity < tokens) capacity *= 2;
  return m.deltanetBytes + Math.min(capacity, config.maxPositionEmbeddings) * m.kvBytesPerToken;
}

export class NativeGarbage {
  private pending = 0;
  private collections = 0;

  constructor(
    /** Dropped bytes that trigger a collection. */
    readonly threshold: number,
    private readonly collect: () => void = exposeGc(),
  ) {}

  /** Counts a dropped session's estimated bytes. */
  drop(bytes: number): void {
    this.pending += bytes;
  }

  /** Collects when enough was dropped; call it between requests (a full collection stops the world). */
  collectIfDue(): void {
    if (this.pending < this.threshold) return;
    this.pending = 0;
    this.collections++;
    this.collect();
  }

  get stats(): { pendingBytes: number; collections: number } {
    return { pendingBytes: this.pending, collections: this.collections };
  }
}

// global.gc when node runs with --expose-gc; otherwise the flag is set now and the function taken
// from a fresh context (V8 installs gc() in contexts created after the flag is set).
function exposeGc(): () => void {
  const existing = (globalThis as { gc?: () => void }).gc;
  if (typeof existing === "function") return existing;
  v8.setFlagsFromString("--expose-gc");
  return vm.runInNewContext("gc") as () => void;
}
