// Kernelspec install/uninstall: locations as jupyter_core computes them, the spec itself, the CLI.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { kernelCommand } from "../../kernel/cli";
import { installKernel, kernelArgv, kernelSpecDir, uninstallKernel } from "../../kernel/install";

let scratch: string;
const saved = { ...process.env };

beforeEach(() => {
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-install-"));
});
afterEach(() => {
  process.env = { ...saved };
  fs.rmSync(scratch, { recursive: true, force: true });
});

describe("kernelspec locations", () => {
  test("prefix: <prefix>/share/jupyter/kernels/moelens", () => {
    expect(kernelSpecDir({ prefix: scratch })).toBe(path.join(scratch, "share", "jupyter", "kernels", "moelens"));
  });

  test("user: JUPYTER_DATA_DIR, else XDG_DATA_HOME/jupyter, else ~/.local/share/jupyter", () => {
    process.env.JUPYTER_DATA_DIR = path.join(scratch, "data");
    expect(kernelSpecDir({ user: true })).toBe(path.join(scratch, "data", "kernels", "moelens"));
    delete process.env.JUPYTER_DATA_DIR;
    process.env.XDG_DATA_HOME = path.join(scratch, "xdg");
    expect(kernelSpecDir()).toBe(path.join(scratch, "xdg", "jupyter", "kernels", "moelens"));
    delete process.env.XDG_DATA_HOME;
    expect(kernelSpecDir({ user: true })).toBe(path.join(os.homedir(), ".local", "share", "jupyter", "kernels", "moelens"));
  });

  test("sys-prefix: the prefix of the Python in jupyter's #! line", () => {
    const jupyter = path.join(scratch, "jupyter");
    fs.writeFileSync(jupyter, "#!/usr/bin/python3\nimport sys\n");
    const prefix = execFileSync("/usr/bin/python3", ["-c", "import sys; print(sys.prefix)"], { encoding: "utf8" }).trim();
    expect(kernelSpecDir({ sysPrefix: true, jupyter })).toBe(path.join(prefix, "share", "jupyter", "kernels", "moelens"));
    fs.writeFileSync(jupyter, "#!/bin/sh\nexec true\n");
    expect(() => kernelSpecDir({ sysPrefix: true, jupyter })).toThrow(/not a Python script/);
  });

  test("rejects two locations at once and odd names", () => {
    expect(() => kernelSpecDir({ user: true, prefix: scratch })).toThrow(/choose one/);
    expect(() => kernelSpecDir({ prefix: scratch, name: "../evil" })).toThrow(/kernel name/);
  });
});

describe("install and uninstall", () => {
  test("writes kernel.json running this kernel on the connection file, and removes it", () => {
    const dir = installKernel({ prefix: scratch, env: { MOELENS_KERNEL_TYPECHECK: "block" } });
    const spec = JSON.parse(fs.readFileSync(path.join(dir, "kernel.json"), "utf8"));
    expect(spec).toMatchObject({
      display_name: "moelens (TypeScript)",
      language: "typescript",
      interrupt_mode: "signal",
      env: { MOELENS_KERNEL_TYPECHECK: "block" },
    });
    expect(spec.argv).toEqual(kernelArgv());
    // Run from the sources (as here), the kernel starts through tsx; from dist/ it is main.js.
    expect(spec.argv).toEqual([process.execPath, "--import", expect.stringMatching(/^file:.*tsx/), path.resolve(__dirname, "../../kernel/main.ts"), "{connection_file}"]);
    expect(uninstallKernel({ prefix: scratch })).toBe(dir);
    expect(fs.existsSync(dir)).toBe(false);
    expect(uninstallKernel({ prefix: scratch })).toBeUndefined();
  });

  test("the command line installs, uninstalls and explains its errors", async () => {
    const out: string[] = [];
    const err = process.stderr.write;
    const log = console.log;
    console.log = (...a: unknown[]) => void out.push(a.join(" "));
    process.stderr.write = ((t: string) => out.push(t) > 0) as typeof process.stderr.write;
    try {
      expect(await kernelCommand(["install", "--prefix", scratch, "--name", "ml2", "--display-name", "Custom"])).toBe(0);
      const spec = JSON.parse(fs.readFileSync(path.join(scratch, "share/jupyter/kernels/ml2/kernel.json"), "utf8"));
      expect(spec.display_name).toBe("Custom");
      expect(await kernelCommand(["uninstall", "--prefix", scratch, "--name", "ml2"])).toBe(0);
      expect(fs.existsSync(path.join(scratch, "share/jupyter/kernels/ml2"))).toBe(false);
      expect(await kernelCommand(["install", "--prefix"])).toBe(2);
      expect(await kernelCommand(["install", "--bogus"])).toBe(2);
      expect(await kernelCommand(["run", path.join(scratch, "missing.json")])).toBe(2);
    } finally {
      console.log = log;
      process.stderr.write = err;
    }
    const text = out.join("\n");
    expect(text).toContain(`installed the kernelspec in ${path.join(scratch, "share/jupyter/kernels/ml2")}`);
    expect(text).toContain("--prefix needs a value");
    expect(text).toContain("unknown option '--bogus'");
    expect(text).toMatch(/cannot read the connection file .*missing\.json/);
    expect(text).toContain("moelens kernel install [--user | --sys-prefix | --prefix DIR]");
  });
});
