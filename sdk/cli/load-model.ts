// Loads the model a command works on, with a progress bar on a terminal.
import * as fs from "node:fs";
import * as path from "node:path";
import { embeddedModelDir, load, type Model } from "../model";
import { native } from "../native";
import { UsageError } from "./errors";
import type { CliOptions } from "./options";
import { progressBar } from "./progress";

export async function loadModel(options: CliOptions): Promise<Model> {
  const dir = path.resolve(options.model ?? embeddedModelDir);
  if (!fs.existsSync(dir)) {
    throw new UsageError(
      options.model === undefined
        ? `the embedded model is not installed (${dir} is missing); pass --model <dir>`
        : `--model ${options.model}: no such folder`,
    );
  }
  if (options.backend !== undefined) {
    const known = native().backends();
    if (!known.includes(options.backend)) {
      throw new UsageError(`--backend ${options.backend}: unknown (available: ${known.join(", ")})`);
    }
  }
  const bar = progressBar(process.stderr, `loading ${path.basename(dir)}`);
  try {
    return await load(dir, { backend: options.backend, threads: options.threads, precision: options.precision, onProgress: bar?.update });
  } finally {
    bar?.end();
  }
}
