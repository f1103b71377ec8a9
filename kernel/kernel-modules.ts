// The modules cells get from the kernel itself rather than from the notebook's node_modules, by name:
// entry paths without extension, next to this file (the sources, or dist/ when built).
import * as path from "node:path";

export const KERNEL_MODULES: Readonly<Record<string, string>> = {
  /** This package's SDK. */
  moelens: path.join(__dirname, "..", "sdk", "index"),
  /** tslab's display helpers, so notebooks written for tslab run unchanged. */
  tslab: path.join(__dirname, "tslab"),
};
