// The TypeScript cell executor in-process: declarations shared across cells, top-level await and
// `for await`, values, errors mapped to cell lines, type errors, interrupts, completion.
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { installBridge, KERNEL_BRIDGE, kernelBridge } from "../../kernel/bridge";
import { refuseProcessExit } from "../../kernel/exit-guard";
import { compileCell } from "../../kernel/cell-transform";
import { Executor, type Outcome, type TypeCheckMode } from "../../kernel/executor";
import { isComplete } from "../../kernel/is-complete";
import { toMimeBundle } from "../../kernel/mime";

function executor(typecheck: TypeCheckMode) {
  const typeErrors: string[] = [];
  const ex = new Executor({ cwd: process.cwd(), typecheck, onTypeErrors: (t) => typeErrors.push(t) });
  let n = 0;
  const run = (code: string) => ex.execute(code, `cell[${typecheck}-${++n}]`);
  return { ex, run, typeErrors };
}

function value(outcome: Outcome): unknown {
  if (outcome.status !== "ok") throw new Error(`cell failed: ${outcome.report.traceback.join("\n")}`);
  return outcome.hasValue ? outcome.value : "<no value>";
}

const plain = (text: string) => text.replace(/\x1b\[[0-9;]*m/g, "");

describe("cells without type checking", () => {
  const { ex, run } = executor("off");

  test("declarations of every kind persist, and can be declared again", async () => {
    await run(`const a = 2; let b = 3; var c = 4;
      const { d, e: [f] } = { d: 5, e: [6] };
      function twice(x: number) { return 2 * x }
      class Counter { n = 0; inc() { return ++this.n } }
      enum Color { Red, Green }
      import * as path from "node:path";`);
    expect(value(await run("[a, b, c, d, f, twice(a), new Counter().inc(), Color.Green, path.basename('/x/y')]"))).toEqual([
      2, 3, 4, 5, 6, 4, 1, 1, "y",
    ]);
    expect(value(await run("b = b + 1; b"))).toBe(4);
    expect(value(await run("const a = 'again'; a"))).toBe("again");
    // `let x;` run again resets x, as a fresh declaration would.
    await run("let reset = 1;");
    expect(value(await run("let reset; reset"))).toBeUndefined();
  });

  test("closures see later assignments to top-level variables", async () => {
    await run("let count = 0; const bump = () => ++count;");
    expect(value(await run("bump(); bump(); count"))).toBe(2);
  });

  test("top-level await and for await", async () => {
    const code = `async function* gen() { for (let i = 1; i <= 3; i++) { await new Promise((r) => setTimeout(r, 1)); yield i; } }
      let total = 0;
      for await (const x of gen()) total += x;
      const later = await Promise.resolve(total * 10);
      later`;
    expect(value(await run(code))).toBe(60);
  });

  test("only a final expression is a value", async () => {
    expect(value(await run("const z = 1;"))).toBe("<no value>");
    expect(value(await run("1;\ntype T = number;"))).toBe("<no value>");
    expect(value(await run("interface I {}\n'x' as string"))).toBe("x");
    expect(value(await run("if (true) { 5 }"))).toBe("<no value>");
  });

  test("errors point at the cell's TypeScript lines, through earlier cells", async () => {
    await run("type Id = number;\nfunction check(id: Id): Id {\n  if (id < 0) throw new RangeError(`negative id ${id}`);\n  return id;\n}");
    const outcome = await run("const ids: Id[] = [1, -2];\nids.map(check)");
    expect(outcome.status).toBe("error");
    if (outcome.status !== "error") return;
    expect(outcome.report.ename).toBe("RangeError");
    expect(outcome.report.evalue).toBe("negative id -2");
    const trace = plain(outcome.report.traceback.join("\n"));
    expect(trace).toMatch(/at check \(cell\[off-\d+\]:3:21\)/);
    expect(trace).toMatch(/cell\[off-\d+\]:2:5/);
    expect(trace).not.toMatch(/kernel\//); // the kernel's own frames are dropped
    expect(trace).toContain("  if (id < 0) throw new RangeError(`negative id ${id}`);");
  });

  test("syntax errors and unsupported exports do not run the cell", async () => {
    const bad = await run("let ran = true;\nconst = 5");
    expect(bad.status === "error" && bad.report.ename).toBe("SyntaxError");
    expect(plain(bad.status === "error" ? bad.report.traceback.join("\n") : "")).toContain("2:7");
    expect((await run("typeof ran")).status === "ok" && value(await run("typeof ran"))).toBe("undefined");
    const exp = await run("export default 1");
    expect(exp.status === "error" && exp.report.evalue).toMatch(/not supported in a cell/);
  });

  test("a non-Error throw and a rejected await are reported", async () => {
    const thrown = await run("throw { code: 7 }");
    expect(thrown.status === "error" && thrown.report.ename).toBe("Thrown");
    const rejected = await run("await Promise.reject(new TypeError('nope'))");
    expect(rejected.status === "error" && rejected.report.evalue).toBe("nope");
  });

  test("interrupt abandons an awaiting cell, and the next cell runs", async () => {
    const pending = run("await new Promise(() => {})");
    await new Promise((r) => setTimeout(r, 20));
    expect(ex.interrupt()).toBe(true);
    const outcome = await pending;
    expect(outcome.status === "error" && outcome.report.ename).toBe("KernelInterrupt");
    expect(ex.interrupt()).toBe(false);
    expect(value(await run("'next'"))).toBe("next");
  });

  test("an interrupt while the cell is being prepared cancels it before it runs", async () => {
    const pending = run("globalThis.preparedCellRan = true;");
    expect(ex.interrupt()).toBe(true);
    const outcome = await pending;
    expect(outcome.status === "error" && outcome.report.ename).toBe("KernelInterrupt");
    expect((globalThis as Record<string, unknown>).preparedCellRan).toBeUndefined();
  });

  test("user expressions evaluate synchronously in the same globals", async () => {
    await run("const shared = 21;");
    expect(ex.evaluate("shared * 2")).toBe(42);
  });
});

describe("cells with type checking", () => {
  test("warn: errors are reported in the compiler's format and the cell still runs", async () => {
    const { run, typeErrors } = executor("warn");
    await run("const n: number = 1;\ninterface Point { x: number }");
    expect(typeErrors).toEqual([]);
    expect(value(await run("const p: Point = { x: n };\nconst s: string = p.x;\ns"))).toBe(1);
    expect(typeErrors).toHaveLength(1);
    expect(plain(typeErrors[0])).toMatch(/cell\[warn-2\]:2:7 - error TS2322: Type 'number' is not assignable to type 'string'/);
    // Declarations from earlier cells are typed: `n` is a number, `Point` is known.
    await run("const q: Point = { x: n + 1 };");
    expect(typeErrors).toHaveLength(1);
    // A redeclaration replaces the earlier type.
    await run("const n = 'text';\nconst len: number = n.length;");
    expect(typeErrors).toHaveLength(1);
  }, 60_000);

  test("block: a cell with type errors does not run", async () => {
    const { run } = executor("block");
    const outcome = await run("globalThis.blockedRan = true;\nconst x: number = 'one';");
    expect(outcome.status === "error" && outcome.report.ename).toBe("TSError");
    expect((globalThis as Record<string, unknown>).blockedRan).toBeUndefined();
  }, 60_000);

  test("completion and inspection see earlier cells", async () => {
    const { ex, run } = executor("warn");
    await run("const zzzFirst = 1;\nfunction zzzSecond(): string { return '' }");
    expect(ex.complete("zzz", 3)).toEqual({ matches: ["zzzFirst", "zzzSecond"], start: 0, end: 3 });
    expect(ex.complete("'abc'.toUpp", 11).matches).toEqual(["toUpperCase"]);
    expect(ex.inspect("zzzSecond", 9)).toContain("function zzzSecond(): string");
  }, 60_000);
});

describe("helpers", () => {
  test("is_complete: open constructs are incomplete, broken ones invalid", () => {
    expect(isComplete("const x = 1")).toEqual({ status: "complete" });
    expect(isComplete("for (const a of b) {\n  f(a")).toEqual({ status: "incomplete", indent: "  " });
    expect(isComplete("if (x) {")).toEqual({ status: "incomplete", indent: "  " });
    expect(isComplete("1 +* 2").status).toBe("invalid");
  });

  test("mime bundles: toMimeBundle, binary data, text fallback, clear errors", () => {
    class Figure {
      toMimeBundle() {
        return { "application/vnd.plotly.v1+json": { data: [] }, "image/png": new Uint8Array([137, 80]), "text/html": "<div/>" };
      }
    }
    expect(toMimeBundle(new Figure())).toEqual({
      "application/vnd.plotly.v1+json": { data: [] },
      "image/png": "iVA=",
      "text/html": "<div/>",
      "text/plain": "<Figure>",
    });
    expect(toMimeBundle({ a: [1, 2] })).toEqual({ "text/plain": "{ a: [ 1, 2 ] }" });
    expect(() => toMimeBundle({ toMimeBundle: () => ({ "text/html": 5 }) })).toThrow(/data for 'text\/html' must be a string/);
    expect(() => toMimeBundle({ toMimeBundle: () => ({ html: "x" }) })).toThrow(/'html' is not a MIME type/);
  });

  test("compiled cells keep line structure for the source map", () => {
    const cell = compileCell("const a: number = 1;\n\nconst b = a\n  .toFixed(2);\nb", "cell[x]");
    const line = cell.script.split("\n").findIndex((l) => l.includes(".toFixed"));
    const column = cell.script.split("\n")[line].indexOf("toFixed");
    expect(cell.toSource(line + 1, column + 1)).toEqual({ line: 3, column: 3 });
  });
});

test("modules resolve from the notebook's folder, wherever it is", async () => {
  const ex = new Executor({ cwd: os.tmpdir(), typecheck: "off", onTypeErrors: () => {} });
  const outcome = await ex.execute('import * as os from "node:os";\ntypeof os.cpus', "cell[tmp]");
  expect(value(outcome)).toBe("function");
});

describe("dynamic import(), process.exit and the tslab module", () => {
  // A notebook folder with a CommonJS package, an ES module package exported to `import` only, and a local file.
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-notebook-"));
  const write = (file: string, text: string) => {
    fs.mkdirSync(path.dirname(path.join(folder, file)), { recursive: true });
    fs.writeFileSync(path.join(folder, file), text);
  };
  write("node_modules/cjs-pkg/package.json", JSON.stringify({ name: "cjs-pkg", main: "index.js" }));
  write("node_modules/cjs-pkg/index.js", "exports.answer = 42; exports.made = Symbol('instance');");
  write("node_modules/esm-only/package.json", JSON.stringify({ name: "esm-only", type: "module", exports: { ".": { import: "./index.js" } } }));
  write("node_modules/esm-only/index.js", "export const answer = 43; export default 'esm default';");
  write("local.mjs", "export const here = 'local';");
  // Created when these tests start: the last executor created is the one cells reach.
  let ex: Executor;
  beforeAll(() => {
    ex = new Executor({ cwd: folder, typecheck: "off", onTypeErrors: () => undefined });
  });
  let n = 0;
  const run = (code: string) => ex.execute(code, `cell[import-${++n}]`);
  afterAll(() => fs.rmSync(folder, { recursive: true, force: true }));

  test("import() loads Node modules, packages of the notebook's folder and local files, without warnings", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on("warning", onWarning);
    try {
      expect(value(await run(`const p = await import("node:path"); p.basename("/a/b")`))).toBe("b");
      expect(value(await run(`(await import("fs")).existsSync === (await import("node:fs")).existsSync`))).toBe(true);
      expect(value(await run(`const c = await import("cjs-pkg"); [c.answer, c.default.answer]`))).toEqual([42, 42]);
      // The same instance as a static import.
      expect(value(await run(`import * as cjs from "cjs-pkg";\n(await import("cjs-pkg")).made === cjs.made`))).toBe(true);
      expect(value(await run(`const e = await import("esm-only"); [e.answer, e.default]`))).toEqual([43, "esm default"]);
      expect(value(await run(`(await import("./local.mjs")).here`))).toBe("local");
      // import() inside a function defined in a cell, called from a later cell.
      await run(`async function later() { return (await import("node:os")).EOL; }`);
      expect(value(await run(`await later()`))).toBe(os.EOL);
      const missing = await run(`await import("no-such-package")`);
      expect(missing.status).toBe("error");
      if (missing.status === "error") expect(missing.report.evalue).toMatch(/no-such-package/);
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).toEqual([]);
    } finally {
      process.off("warning", onWarning);
    }
  });

  test("process.exit() in a cell is refused with an explanation, and the next cell runs", async () => {
    const restore = refuseProcessExit();
    try {
      const outcome = await run(`const before = 1;\nprocess.exit(3)`);
      expect(outcome.status).toBe("error");
      if (outcome.status !== "error") return;
      expect(outcome.report.ename).toBe("ProcessExitRefused");
      expect(outcome.report.evalue).toBe(
        "process.exit(3) would end the kernel and lose the notebook's state, so the kernel refuses it: " +
          "throw an error to stop a cell, or restart the kernel (Kernel > Restart) to start over",
      );
      expect(plain(outcome.report.traceback.join("\n"))).toMatch(/cell\[import-\d+\]:2:9/);
      expect(value(await run("before + 1"))).toBe(2);
    } finally {
      restore();
    }
  });

  test("the tslab module sends tslab's displays through the kernel", async () => {
    // Cells load kernel modules with Node's require: let it read the kernel's TypeScript sources.
    const { register } = createRequire(__filename)("tsx/cjs/api") as { register: () => () => void };
    const unregister = register();
    const sent: { kind: string; bundle: Record<string, unknown>; displayId?: string }[] = [];
    const previous = kernelBridge();
    installBridge({
      display: (v, o) => sent.push({ kind: "display", bundle: toMimeBundle(v), displayId: o?.displayId }),
      updateDisplay: (v, o) => sent.push({ kind: "update", bundle: toMimeBundle(v), displayId: o.displayId }),
      clearOutput: () => undefined,
      onInterrupt: () => () => undefined,
      mimeBundle: toMimeBundle,
    });
    try {
      const outcome = await run(`import * as tslab from "tslab";
        tslab.display.html("<b>h</b>");
        tslab.display.markdown("# m");
        tslab.display.svg("<svg/>");
        tslab.display.png(new Uint8Array([1, 2, 3]));
        tslab.display.jpeg(new Uint8Array([4, 5]));
        tslab.display.text("t");
        const d = tslab.newDisplay();
        d.html("first");
        d.html("second");
        [tslab.isNode, tslab.isBrowser]`);
      expect(value(outcome)).toEqual([true, false]);
      expect(sent.slice(0, 6).map((s) => s.bundle)).toEqual([
        { "text/plain": "", "text/html": "<b>h</b>" },
        { "text/plain": "", "text/markdown": "# m" },
        { "text/plain": "", "image/svg+xml": "<svg/>" },
        { "text/plain": "", "image/png": "AQID" },
        { "text/plain": "", "image/jpeg": "BAU=" },
        { "text/plain": "t" },
      ]);
      expect(sent.slice(0, 6).every((s) => s.kind === "display" && s.displayId === undefined)).toBe(true);
      const [first, second] = sent.slice(6);
      expect(first).toMatchObject({ kind: "display", bundle: { "text/html": "first" } });
      expect(second).toMatchObject({ kind: "update", bundle: { "text/html": "second" }, displayId: first.displayId });
      expect(first.displayId).toBeDefined();
      // Dynamic import gives the same module.
      expect(value(await run(`(await import("tslab")).display === tslab.display`))).toBe(true);
    } finally {
      unregister();
      if (previous) installBridge(previous);
      else delete (globalThis as Record<symbol, unknown>)[KERNEL_BRIDGE];
    }
  });
});
