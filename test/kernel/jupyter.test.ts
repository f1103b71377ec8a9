// The installed kernel under real Jupyter clients from Debian (jupyter_client 7, nbconvert 6):
// jupyter_kernel_test's conformance suite plus our own protocol checks, and a notebook executed
// end to end. CI installs the packages (.ci/run); without them these tests fail, saying so.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { DISPLAY_NAME, installKernel, uninstallKernel } from "../../kernel/install";
import { JUPYTER, PYTHON, codeCells, joined, jupyterEnv, requireDebianJupyter, run, type Output, type Run } from "../helpers/jupyter";

const HERE = __dirname;

describe("the moelens kernel under Jupyter", () => {
  let prefix: string;
  let specDir: string;
  let env: NodeJS.ProcessEnv;
  let conformance: Promise<Run>;
  let notebook: Promise<Run>;
  const executed = () => path.join(prefix, "smoke.out.ipynb");

  beforeAll(() => {
    requireDebianJupyter();
    prefix = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-kernel-"));
    specDir = installKernel({ prefix });
    env = jupyterEnv(prefix);
    // Both start now and run side by side; each test awaits its own.
    conformance = run(PYTHON, [path.join(HERE, "test_conformance.py")], env, 150_000, HERE);
    notebook = run(
      JUPYTER,
      ["nbconvert", "--to", "notebook", "--execute", "--allow-errors", "--ExecutePreprocessor.timeout=90",
       path.join(HERE, "smoke.ipynb"), "--output-dir", prefix, "--output", "smoke.out"],
      env,
      150_000,
      HERE,
    );
  });

  afterAll(async () => {
    await Promise.allSettled([conformance, notebook]);
    if (!prefix) return;
    expect(uninstallKernel({ prefix })).toBe(specDir);
    expect(fs.existsSync(specDir)).toBe(false);
    fs.rmSync(prefix, { recursive: true, force: true });
  });

  test("Debian's jupyter lists the installed kernelspec", () => {
    const listed = JSON.parse(execFileSync(JUPYTER, ["kernelspec", "list", "--json"], { env, encoding: "utf8" }));
    const spec = listed.kernelspecs.moelens;
    expect(spec.resource_dir).toBe(specDir);
    expect(spec.spec.display_name).toBe(DISPLAY_NAME);
    expect(spec.spec.language).toBe("typescript");
    expect(spec.spec.argv[0]).toBe(process.execPath);
    expect(spec.spec.argv[spec.spec.argv.length - 1]).toBe("{connection_file}");
  });

  test("passes jupyter_kernel_test and the interrupt, display and streaming checks", async () => {
    const r = await conformance;
    const summary = /Ran (\d+) tests[\s\S]*\n(OK.*|FAILED.*)/.exec(r.output);
    expect(summary, r.output.slice(-6000)).not.toBeNull();
    expect(summary![2], r.output.slice(-6000)).toBe("OK (skipped=1)"); // only test_pager: we have no pager
    expect(Number(summary![1])).toBeGreaterThanOrEqual(25);
    expect(r.status).toBe(0);
  }, 160_000);

  test("executes a notebook: counts, results, long output, display updates, errors", async () => {
    const r = await notebook;
    expect(r.status, r.output.slice(-4000)).toBe(0);
    const cells = codeCells(JSON.parse(fs.readFileSync(executed(), "utf8")));
    expect(cells.map((c) => c.execution_count)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    const [greeting, lines, tokens, failing, after, figure, sdk] = cells.map((c) => c.outputs ?? []);
    const result = (outputs: Output[]) => outputs.find((o) => o.output_type === "execute_result");

    expect(result(greeting)).toMatchObject({ execution_count: 1, data: { "text/plain": "'hello'" } });

    const stdout = lines.filter((o) => o.output_type === "stream" && o.name === "stdout").map((o) => o.text).join("");
    expect(stdout).toBe(Array.from({ length: 10_000 }, (_, i) => `line ${i}\n`).join(""));

    // The display updated in place ends with all 1,000 tokens.
    const shown = tokens.find((o) => o.output_type === "display_data");
    expect(shown?.data?.["text/plain"]).toBe(Array.from({ length: 1000 }, (_, i) => `t${i} `).join(""));
    expect(result(tokens)).toMatchObject({ execution_count: 3, data: { "text/plain": "1000" } });

    expect(failing).toHaveLength(1);
    expect(failing[0]).toMatchObject({ output_type: "error", ename: "RangeError", evalue: "an expected failure" });
    expect(failing[0].traceback!.join("\n")).toContain("cell[4]:1:7");

    expect(result(after)).toMatchObject({ execution_count: 5, data: { "text/plain": "'HELLO'" } });

    const bundle = { "application/vnd.plotly.v1+json": { data: [{ type: "bar", y: [1, 2, 3] }], layout: { title: { text: "bars" } } } };
    expect(figure.find((o) => o.output_type === "display_data")?.data).toMatchObject(bundle);
    expect(result(figure)?.data).toMatchObject(bundle);
    expect(result(figure)?.data?.["text/html"]).toBe("<div>bars</div>");

    expect(result(sdk)?.data?.["text/plain"]).toBe("[ 'function', 'string' ]");
    for (const c of cells.filter((c) => c !== cells[3])) {
      expect(c.outputs?.filter((o) => o.output_type === "error"), joined(c.source)).toEqual([]);
    }
  }, 160_000);
});
