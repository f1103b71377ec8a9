// How code outside the kernel's own modules (cells, the SDK) reaches the running kernel: one object
// on a well-known global symbol, so it works whichever copy of a module (sources or dist/) is loaded.
import type { MimeBundle } from "./mime";

export interface DisplayOptions {
  /** Names the output so `updateDisplay` can replace it later. */
  displayId?: string;
  /** Per-output metadata (e.g. {"image/png": {width: 300}}). */
  metadata?: Record<string, unknown>;
}

export interface KernelBridge {
  display(value: unknown, options?: DisplayOptions): void;
  updateDisplay(value: unknown, options: DisplayOptions & { displayId: string }): void;
  clearOutput(options?: { wait?: boolean }): void;
  /** Runs `hook` when the user interrupts the kernel; returns a function that removes it. */
  onInterrupt(hook: () => void): () => void;
  /** The MIME bundle the kernel would send for `value`. */
  mimeBundle(value: unknown): MimeBundle;
}

/** The global symbol the running kernel is published under. */
export const KERNEL_BRIDGE = Symbol.for("moelens.kernel");

type WithBridge = typeof globalThis & { [KERNEL_BRIDGE]?: KernelBridge };

export function installBridge(bridge: KernelBridge): void {
  (globalThis as WithBridge)[KERNEL_BRIDGE] = bridge;
}

/** The running kernel, or undefined outside Jupyter. */
export function kernelBridge(): KernelBridge | undefined {
  return (globalThis as WithBridge)[KERNEL_BRIDGE];
}
