// `moelens kernel ...`: forwarded to the Jupyter kernel's own command line (kernel/cli.ts), loaded
// only when asked for, so the rest of the CLI works without it.
import * as path from "node:path";

interface KernelCli {
  kernelCommand(args: string[]): Promise<number>;
}

export async function kernelCommand(args: string[]): Promise<number> {
  // sdk/cli/commands -> kernel/cli, from the sources and from dist/ alike.
  const file = path.join(__dirname, "..", "..", "..", "kernel", "cli");
  let cli: Partial<KernelCli>;
  try {
    cli = require(file) as Partial<KernelCli>;
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code !== "MODULE_NOT_FOUND" || !err.message.includes(file)) throw e;
    throw new Error(`the Jupyter kernel is not part of this build (${file}.js is missing)`);
  }
  if (typeof cli.kernelCommand !== "function") throw new Error(`${file} does not export kernelCommand()`);
  return cli.kernelCommand(args);
}
