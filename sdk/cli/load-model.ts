// Loads the model a command works on, with a progress bar on a terminal.
import * as fs from "node:fs";
import * as path from "node:path";
import { embeddedModelDir, load, type Model } from "../model";
import { native } from "../native";
import { UsageError } from "./errors";
import type { ModelFlags } from "./options";
import { progressBar } from "./progress";

export async function loadModel(options: ModelFlags): Promise<Model> {
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
  checkEmulator(options);
  const bar = progressBar(process.stderr, `loading ${path.basename(dir)}`);
  try {
    return await load(dir, { backend: options.backend, emulator: options.emulator, threads: options.threads, precision: options.precision, onProgress: bar?.update });
  } finally {
    bar?.end();
  }
}

// Off macOS the Metal backend runs its kernels on the CPU emulator: a correctness harness, far slower
// than the cpu backend, so it runs only when asked for by name.
function checkEmulator(options: ModelFlags): void {
  const onMac = process.platform === "darwin";
  if (options.backend === "metal" && !onMac && !options.emulator) {
    throw new UsageError(
      `--backend metal: Metal needs macOS; on ${process.platform}, --backend emulator runs the same kernels on the CPU ` +
        "emulator, a test harness far slower than --backend cpu (add --emulator to run the Metal host over it anyway)",
    );
  }
  if (options.emulator && onMac) throw new UsageError("--emulator: on macOS --backend metal runs on the GPU, not on the emulator");
}
