// The functions notebook cells get as globals: rich display and interrupt hooks.
import { kernelBridge, type DisplayOptions, type KernelBridge } from "./bridge";

function bridge(what: string): KernelBridge {
  const b = kernelBridge();
  if (!b) throw new Error(`${what}() needs the moelens Jupyter kernel, which is not running in this process`);
  return b;
}

/**
 * Shows `value` as an output of the current cell. A value with a `toMimeBundle()` method renders with
 * the bundle it returns ({"text/html": ..., "application/vnd.plotly.v1+json": ...}); anything else
 * as text. Give a `displayId` to update it later with `updateDisplay`.
 */
export function display(value: unknown, options?: DisplayOptions): void {
  bridge("display").display(value, options);
}

/** Replaces the output shown earlier with `display(..., { displayId })`, wherever it is. */
export function updateDisplay(value: unknown, options: DisplayOptions & { displayId: string }): void {
  bridge("updateDisplay").updateDisplay(value, options);
}

/** Clears the current cell's outputs (with `wait`, only when the next output arrives). */
export function clearOutput(options?: { wait?: boolean }): void {
  bridge("clearOutput").clearOutput(options);
}

/** Runs `hook` when the user interrupts the kernel (e.g. to cancel native work); returns an unregister function. */
export function onInterrupt(hook: () => void): () => void {
  return bridge("onInterrupt").onInterrupt(hook);
}

/** Names and values installed on globalThis for cells (their types come from this module). */
export const CELL_GLOBALS = { display, updateDisplay, clearOutput, onInterrupt } as const;
