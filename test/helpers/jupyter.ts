// Driving Debian's Jupyter (/usr/bin/python3, /usr/bin/jupyter) from tests: running its commands,
// checking it is installed, the environment that finds a kernelspec installed under a prefix, and the
// shapes of executed notebooks. CI installs the packages (.ci/run).
import { execFile, execFileSync } from "node:child_process";
import * as path from "node:path";

export const PYTHON = "/usr/bin/python3";
export const JUPYTER = "/usr/bin/jupyter";

export interface Run {
  status: number | null;
  output: string;
}

/** Runs a command to completion (never rejects): its exit status and stdout + stderr. */
export function run(command: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number, cwd: string): Promise<Run> {
  return new Promise((resolve) => {
    execFile(command, args, { env, timeout: timeoutMs, maxBuffer: 64 << 20, cwd }, (error, stdout, stderr) => {
      resolve({ status: error ? (typeof error.code === "number" ? error.code : -1) : 0, output: `${stdout}\n${stderr}` });
    });
  });
}

export function requireDebianJupyter(): void {
  const probe = "import jupyter_client, jupyter_kernel_test, nbclient, nbconvert";
  try {
    execFileSync(PYTHON, ["-c", probe], { stdio: "pipe" });
  } catch {
    throw new Error(
      `${PYTHON} lacks Jupyter: apt-get install jupyter-client jupyter-nbconvert python3-nbclient python3-jupyter-kernel-test (see .ci/run)`,
    );
  }
}

/** The environment under which Jupyter finds the kernelspec installed with `installKernel({ prefix })`. */
export function jupyterEnv(prefix: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    JUPYTER_PATH: path.join(prefix, "share", "jupyter"),
    JUPYTER_RUNTIME_DIR: path.join(prefix, "runtime"),
    PYDEVD_DISABLE_FILE_VALIDATION: "1",
    PYTHONUNBUFFERED: "1",
  };
}

export type Output = {
  output_type: string;
  name?: string;
  text?: string | string[];
  data?: Record<string, unknown>;
  execution_count?: number;
  ename?: string;
  evalue?: string;
  traceback?: string[];
};
export type Cell = { cell_type: string; source: string | string[]; execution_count?: number | null; outputs?: Output[] };

/** .ipynb files store multi-line strings as arrays of lines. */
export const joined = (t: string | string[] | undefined) => (Array.isArray(t) ? t.join("") : (t ?? ""));

/** The code cells of an executed notebook, with every multi-line string joined. */
export function codeCells(notebook: { cells: Cell[] }): Cell[] {
  const cells = notebook.cells.filter((c) => c.cell_type === "code");
  for (const o of cells.flatMap((c) => c.outputs ?? [])) {
    o.text = joined(o.text);
    for (const [mime, data] of Object.entries(o.data ?? {})) if (Array.isArray(data)) o.data![mime] = data.join("");
  }
  return cells;
}
