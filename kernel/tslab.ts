// The "tslab" module of cells: tslab's display helpers (`tslab.display.html(...)`, `newDisplay()`),
// so notebooks written for the tslab kernel run unchanged. Each helper sends one MIME type.
import * as fs from "node:fs";
import * as path from "node:path";
import { packageRoot } from "../sdk/native";
import { kernelBridge } from "./bridge";
import type { MimeBundle } from "./mime";

export interface Display {
  javascript(s: string): void;
  html(s: string): void;
  markdown(s: string): void;
  latex(s: string): void;
  svg(s: string): void;
  png(b: Uint8Array): void;
  jpeg(b: Uint8Array): void;
  gif(b: Uint8Array): void;
  pdf(b: Uint8Array): void;
  text(s: string): void;
  /** Any MIME type: text as a string, binary data as bytes. */
  raw(contentType: string, b: string | Uint8Array): void;
}

/** The versions tslab reports; here the kernel's. */
export const versions = {
  tslab: `moelens kernel ${(JSON.parse(fs.readFileSync(path.join(packageRoot, "package.json"), "utf8")) as { version: string }).version}`,
  node: process.version,
};
export const isNode = true;
export const isBrowser = false;

/** One output of one MIME type (and an empty text/plain, so the kernel adds no class name). */
class TslabOutput {
  constructor(private readonly bundle: MimeBundle) {}
  toMimeBundle(): MimeBundle {
    return this.bundle;
  }
}

function makeDisplay(displayId?: string): Display {
  let shown = false;
  const send = (mime: string, data: string | Uint8Array) => {
    const bridge = kernelBridge();
    if (!bridge) throw new Error("tslab.display needs the moelens Jupyter kernel, which is not running in this process");
    const output = new TslabOutput({ "text/plain": "", [mime]: data });
    // A display from newDisplay() replaces its own output after the first time, as in tslab.
    if (displayId !== undefined && shown) bridge.updateDisplay(output, { displayId });
    else bridge.display(output, displayId === undefined ? undefined : { displayId });
    shown = true;
  };
  return {
    javascript: (s) => send("application/javascript", s),
    html: (s) => send("text/html", s),
    markdown: (s) => send("text/markdown", s),
    latex: (s) => send("text/latex", s),
    svg: (s) => send("image/svg+xml", s),
    png: (b) => send("image/png", b),
    jpeg: (b) => send("image/jpeg", b),
    gif: (b) => send("image/gif", b),
    pdf: (b) => send("application/pdf", b),
    text: (s) => send("text/plain", s),
    raw: (contentType, b) => send(contentType, b),
  };
}

/** Sends a new output for each call. */
export const display: Display = makeDisplay();

let displays = 0;
/** A display whose later calls replace its first output (update_display_data). */
export function newDisplay(): Display {
  return makeDisplay(`tslab-${process.pid}-${++displays}`);
}
