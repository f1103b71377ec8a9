#!/usr/bin/env node
// Executes a notebook on the moelens kernel and writes the executed copy: under Jupyter (nbconvert,
// where python3 has it) or, without Jupyter, headless with the kernel's own cell executor in this
// process. Any cell error or type error fails the run. Needs the built SDK and kernel (dist/).
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { parseArgs } from "node:util";

const USAGE = `Usage: node scripts/run-notebook.mjs NOTEBOOK.ipynb --out EXECUTED.ipynb [options]

Executes every code cell of a moelens notebook in order and writes the executed notebook.

Options:
  --out <file>         where the executed notebook goes (required)
  --backend <name>     load the notebook's model on this backend (cpu, emulator, metal, cuda):
                       its \`load(MODEL_DIR, { ... })\` call gets \`backend: "<name>"\`, and a last
                       cell checks \`model.info.backend\`
  --runner <how>       jupyter (nbconvert and the installed moelens kernel), headless (the kernel's
                       executor in this process, no Jupyter), or auto (default: jupyter where
                       python3 has nbconvert, else headless)
  --timeout <seconds>  per cell (default 600)
  -h, --help           this text`;

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..");
const requireDist = createRequire(path.join(root, "dist", "kernel", "main.js"));

class UsageError extends Error {}

function options() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      out: { type: "string" },
      backend: { type: "string" },
      runner: { type: "string", default: "auto" },
      timeout: { type: "string", default: "600" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  if (positionals.length !== 1) throw new UsageError("give one notebook (.ipynb)");
  if (!values.out) throw new UsageError("--out <file> is required");
  if (!values.out.endsWith(".ipynb")) throw new UsageError(`--out ${values.out}: the executed notebook's name ends in .ipynb`);
  if (!["auto", "jupyter", "headless"].includes(values.runner)) throw new UsageError(`--runner ${values.runner}: use jupyter, headless or auto`);
  const timeout = Number(values.timeout);
  if (!Number.isInteger(timeout) || timeout < 1) throw new UsageError(`--timeout ${values.timeout}: a whole number of seconds`);
  return { notebook: positionals[0], out: values.out, backend: values.backend, runner: values.runner, timeout };
}

const source = (cell) => (Array.isArray(cell.source) ? cell.source.join("") : cell.source);
const lines = (text) => text.split(/(?<=\n)/);

function readNotebook(file) {
  let nb;
  try {
    nb = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (e) {
    throw new UsageError(`${file}: not a readable notebook (${e.message})`);
  }
  if (!Array.isArray(nb.cells)) throw new UsageError(`${file}: not a notebook (no "cells")`);
  return nb;
}

// Puts the notebook's model on `backend`, and adds a last cell whose value is the backend it ran on.
const LOAD_CALL = "await load(MODEL_DIR, {";
function onBackend(nb, file, backend) {
  const cells = nb.cells.filter((c) => c.cell_type === "code" && source(c).includes(LOAD_CALL));
  if (cells.length !== 1) {
    throw new UsageError(`${file}: --backend needs exactly one \`${LOAD_CALL} ... })\` call to change; found ${cells.length}`);
  }
  cells[0].source = lines(source(cells[0]).replace(LOAD_CALL, `${LOAD_CALL} backend: ${JSON.stringify(backend)},`));
  const check = { cell_type: "code", execution_count: null, metadata: {}, outputs: [], source: ["model.info.backend"] };
  // Cells have ids from nbformat 4.5 on.
  nb.cells.push(nb.nbformat > 4 || nb.nbformat_minor >= 5 ? { id: "moelens-backend-check", ...check } : check);
}

function hasJupyter() {
  return spawnSync("python3", ["-c", "import nbconvert, nbclient, jupyter_client"], { stdio: "ignore" }).status === 0;
}

// nbconvert on a kernelspec installed into a temporary prefix (nothing is left in the user's Jupyter).
function runJupyter(input, out, timeout) {
  const prefix = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-notebook-"));
  try {
    requireDist("./install").installKernel({ prefix });
    const env = { ...process.env, JUPYTER_PATH: path.join(prefix, "share", "jupyter"), JUPYTER_RUNTIME_DIR: path.join(prefix, "runtime") };
    const args = ["-m", "nbconvert", "--to", "notebook", "--execute", `--ExecutePreprocessor.timeout=${timeout}`,
      "--ExecutePreprocessor.kernel_name=moelens", input, "--output-dir", path.dirname(out), "--output", path.basename(out, ".ipynb")];
    const run = spawnSync("python3", args, { env, stdio: "inherit" });
    if (run.status !== 0) throw new Error(`nbconvert --execute failed (exit ${run.status ?? run.signal})`);
  } finally {
    fs.rmSync(prefix, { recursive: true, force: true });
  }
  return readNotebook(out);
}

// The kernel's executor in this process; displays and values become the cells' outputs.
async function runHeadless(nb, notebookDir, timeout) {
  const { Executor } = requireDist("./executor");
  const { installBridge } = requireDist("./bridge");
  const { toMimeBundle } = requireDist("./mime");
  let outputs = [];
  const displays = new Map();
  installBridge({
    display(value, o = {}) {
      const output = { output_type: "display_data", data: toMimeBundle(value), metadata: o.metadata ?? {} };
      if (o.displayId) displays.set(o.displayId, output);
      outputs.push(output);
    },
    updateDisplay(value, o) {
      const output = displays.get(o.displayId);
      if (output) output.data = toMimeBundle(value);
    },
    clearOutput() {
      outputs.length = 0;
    },
    onInterrupt: () => () => {},
    mimeBundle: toMimeBundle,
  });
  const typeErrors = [];
  const executor = new Executor({ cwd: notebookDir, typecheck: "warn", onTypeErrors: (t) => typeErrors.push(t) });
  let count = 0;
  for (const cell of nb.cells.filter((c) => c.cell_type === "code")) {
    outputs = [];
    displays.clear();
    const errorsBefore = typeErrors.length;
    const name = `cell[${++count}]`;
    let timer;
    const outcome = await Promise.race([
      executor.execute(source(cell), name),
      new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${name}: still running after ${timeout} s`)), timeout * 1000))),
    ]).finally(() => clearTimeout(timer));
    for (const text of typeErrors.slice(errorsBefore)) outputs.push({ output_type: "stream", name: "stderr", text: lines(text) });
    if (outcome.status === "error") {
      outputs.push({ output_type: "error", ...outcome.report });
    } else if (outcome.hasValue && outcome.value !== undefined) {
      outputs.push({ output_type: "execute_result", execution_count: count, data: toMimeBundle(outcome.value), metadata: {} });
    }
    cell.execution_count = count;
    cell.outputs = outputs;
    const shown = outputs.find((o) => o.output_type === "execute_result")?.data["text/plain"];
    console.log(`${name}: ${outcome.status}${shown !== undefined ? ` -> ${String(shown).split("\n")[0].slice(0, 100)}` : ""}`);
    if (outcome.status === "error") throw new Error(`${name} failed:\n${outcome.report.traceback.join("\n")}`);
    if (typeErrors.length > errorsBefore) throw new Error(`${name} has type errors:\n${typeErrors.slice(errorsBefore).join("\n")}`);
  }
  return nb;
}

function lastValue(nb) {
  const cell = nb.cells.filter((c) => c.cell_type === "code").at(-1);
  const result = cell?.outputs?.find((o) => o.output_type === "execute_result");
  const text = result?.data?.["text/plain"];
  return Array.isArray(text) ? text.join("") : text;
}

async function main() {
  const o = options();
  const nb = readNotebook(o.notebook);
  if (o.backend) onBackend(nb, o.notebook, o.backend);
  const runner = o.runner === "auto" ? (hasJupyter() ? "jupyter" : "headless") : o.runner;
  if (runner === "jupyter" && !hasJupyter()) throw new UsageError("--runner jupyter: python3 lacks nbconvert / nbclient / jupyter_client");
  console.log(`${path.basename(o.notebook)}: running under ${runner === "jupyter" ? "Jupyter (nbconvert)" : "the kernel's executor, headless"}` +
    (o.backend ? ` on the ${o.backend} backend` : ""));
  const out = path.resolve(o.out);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  let executed;
  if (runner === "jupyter") {
    // The changed notebook runs from the original's folder, where its relative paths point.
    const input = path.join(path.dirname(path.resolve(o.notebook)), `.${path.basename(out)}.input.ipynb`);
    fs.writeFileSync(input, JSON.stringify(nb, null, 1));
    try {
      executed = runJupyter(input, out, o.timeout);
    } finally {
      fs.rmSync(input, { force: true });
    }
  } else {
    executed = await runHeadless(nb, path.dirname(path.resolve(o.notebook)), o.timeout);
    fs.writeFileSync(out, JSON.stringify(executed, null, 1) + "\n");
  }
  if (o.backend && lastValue(executed) !== `'${o.backend}'`) {
    throw new Error(`the notebook's model ran on ${lastValue(executed) ?? "an unknown backend"}, not on ${o.backend}`);
  }
  console.log(`${path.basename(o.notebook)}: every cell ran; executed notebook in ${o.out}`);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`run-notebook: ${e.message}`);
    if (e instanceof UsageError) console.error(`\n${USAGE}`);
    process.exit(e instanceof UsageError ? 2 : 1);
  },
);
