// scripts/run-notebook.mjs headless (the kernel's executor, no Jupyter): every code cell runs in
// order, values and displays become outputs of the executed notebook, --backend puts the model on
// that backend and checks it ran there; a failing cell, a type error or a notebook --backend cannot
// change fails the run with a message naming it.
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, expect, test } from "vitest";
import { ensureBuiltDist } from "./helpers/built-dist";

const root = path.resolve(__dirname, "..");
let dir: string;

beforeAll(() => {
  ensureBuiltDist(root);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-run-notebook-"));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function notebook(name: string, cells: string[]): string {
  const file = path.join(dir, `${name}.ipynb`);
  const nb = {
    cells: cells.map((source) => ({ cell_type: "code", execution_count: null, metadata: {}, outputs: [], source })),
    metadata: { kernelspec: { name: "moelens", display_name: "moelens (TypeScript)", language: "typescript" } },
    nbformat: 4,
    nbformat_minor: 5,
  };
  fs.writeFileSync(file, JSON.stringify(nb));
  return file;
}

function runNotebook(file: string, ...args: string[]) {
  const out = file.replace(/\.ipynb$/, ".out.ipynb");
  const r = spawnSync(process.execPath, [path.join(root, "scripts", "run-notebook.mjs"), file, "--out", out, "--runner", "headless", ...args], {
    encoding: "utf8",
    timeout: 200_000,
  });
  return { status: r.status, output: `${r.stdout}${r.stderr}`, out };
}

test("every cell runs; values, displays and the backend the model ran on are in the executed notebook", () => {
  const file = notebook("model", [
    'import { load, embeddedModelDir } from "moelens";\nconst MODEL_DIR = embeddedModelDir;\nconst answer: number = 6 * 7;\nanswer',
    'display({ toMimeBundle: () => ({ "text/html": "<b>shown</b>" }) });',
    "const model = await load(MODEL_DIR, { threads: 1 });\nmodel.config.numLayers",
  ]);
  const r = runNotebook(file, "--backend", "emulator");
  expect(r.status, r.output).toBe(0);
  expect(r.output).toContain("running under the kernel's executor, headless on the emulator backend");
  const cells = JSON.parse(fs.readFileSync(r.out, "utf8")).cells;
  expect(cells.length).toBe(4);
  expect(cells[0].outputs).toEqual([{ output_type: "execute_result", execution_count: 1, data: { "text/plain": "42" }, metadata: {} }]);
  expect(cells[1].outputs[0]).toMatchObject({ output_type: "display_data", data: { "text/html": "<b>shown</b>" } });
  expect(cells[2].source.join("")).toContain('await load(MODEL_DIR, { backend: "emulator", threads: 1 })');
  expect(cells[3].outputs[0].data["text/plain"]).toBe("'emulator'");
}, 240_000);

test("a failing cell fails the run and names the cell and the error", () => {
  const r = runNotebook(notebook("failing", ["1 + 1", 'throw new RangeError("an expected failure")', "2 + 2"]));
  expect(r.status).toBe(1);
  expect(r.output).toMatch(/cell\[2\] failed:[\s\S]*RangeError[\s\S]*an expected failure/);
  expect(r.output).not.toContain("cell[3]");
}, 240_000);

test("a type error fails the run", () => {
  const r = runNotebook(notebook("typed", ['const n: number = "not a number";']));
  expect(r.status).toBe(1);
  expect(r.output).toMatch(/cell\[1\] has type errors:[\s\S]*not assignable to type 'number'/);
}, 240_000);

test("--backend on a notebook without one load(MODEL_DIR, {...}) call, and bad options, are refused", () => {
  const file = notebook("plain", ["1 + 1"]);
  const r = runNotebook(file, "--backend", "cuda");
  expect(r.status).toBe(2);
  expect(r.output).toContain("plain.ipynb: --backend needs exactly one `await load(MODEL_DIR, { ... })` call to change; found 0");
  expect(runNotebook(file, "--timeout", "soon").output).toContain("--timeout soon: a whole number of seconds");
  expect(runNotebook(file, "--out", path.join(dir, "executed.json")).output).toContain("executed.json: the executed notebook's name ends in .ipynb");
  expect(runNotebook(path.join(dir, "missing.ipynb")).output).toMatch(/missing\.ipynb: not a readable notebook/);
});
