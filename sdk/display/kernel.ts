// The running moelens Jupyter kernel, reached through its global bridge (kernel/bridge.ts) so that
// the SDK never imports the kernel. Outside Jupyter there is none and displays do nothing.
import * as crypto from "node:crypto";

/** The part of the kernel bridge that live displays use. */
export interface DisplayBridge {
  display(value: unknown, options?: { displayId?: string }): void;
  updateDisplay(value: unknown, options: { displayId: string }): void;
}

export function displayBridge(): DisplayBridge | undefined {
  return (globalThis as Record<symbol, DisplayBridge | undefined>)[Symbol.for("moelens.kernel")];
}

/** A display id that no other output uses. */
export function newDisplayId(kind: string): string {
  return `moelens-${kind}-${crypto.randomUUID()}`;
}
