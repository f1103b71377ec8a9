// While the kernel runs, `process.exit()` (from a cell or a library) would end it and lose every
// variable of the notebook; it throws an error that says so instead.

/** What `process.exit()` throws inside the kernel. */
export class ProcessExitRefused extends Error {
  override name = "ProcessExitRefused";
  constructor(code: unknown) {
    super(
      `process.exit(${code === undefined ? "" : String(code)}) would end the kernel and lose the notebook's state, so the ` +
        "kernel refuses it: throw an error to stop a cell, or restart the kernel (Kernel > Restart) to start over",
    );
  }
}

/** Replaces process.exit; returns the function that puts it back (the kernel's own shutdown). */
export function refuseProcessExit(): () => void {
  const original = process.exit;
  process.exit = ((code?: unknown) => {
    throw new ProcessExitRefused(code);
  }) as typeof process.exit;
  return () => {
    process.exit = original;
  };
}
