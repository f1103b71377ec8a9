// Installs the Jupyter kernelspec "moelens": a kernels/moelens/kernel.json that Jupyter (Debian's
// /usr/bin/jupyter included) finds and launches as `node <kernel entry> {connection_file}`.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { pathToFileURL } from "node:url";

export const KERNEL_NAME = "moelens";
export const DISPLAY_NAME = "moelens (TypeScript)";

/** Where the kernelspec goes; at most one of the three (default: `user`). */
export interface KernelLocation {
  /** The user's Jupyter data folder (~/.local/share/jupyter on Linux), like `jupyter kernelspec install --user`. */
  user?: boolean;
  /** The prefix of the Python that runs `jupyter` (/usr for Debian's), like `--sys-prefix`. */
  sysPrefix?: boolean;
  /** <prefix>/share/jupyter; Jupyter finds it when it is in JUPYTER_PATH or is its sys.prefix. */
  prefix?: string;
  /** The `jupyter` executable whose Python defines `sysPrefix` (default: `jupyter` on PATH, else /usr/bin/jupyter). */
  jupyter?: string;
  /** Kernelspec name (default "moelens"). */
  name?: string;
}

export interface InstallOptions extends KernelLocation {
  /** Shown in the notebook's kernel menu (default "moelens (TypeScript)"). */
  displayName?: string;
  /** Environment variables for the kernel process, e.g. { MOELENS_KERNEL_TYPECHECK: "block" }. */
  env?: Record<string, string>;
}

// The user data folder, by jupyter_core's rules.
function jupyterDataDir(): string {
  if (process.env.JUPYTER_DATA_DIR) return process.env.JUPYTER_DATA_DIR;
  const home = os.homedir();
  if (process.platform === "darwin") return path.join(home, "Library", "Jupyter");
  if (process.platform === "win32") return path.join(process.env.APPDATA ?? path.join(home, "AppData", "Roaming"), "jupyter");
  return path.join(process.env.XDG_DATA_HOME || path.join(home, ".local", "share"), "jupyter");
}

function findJupyter(): string {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    const candidate = path.join(dir, "jupyter");
    if (dir !== "" && fs.existsSync(candidate)) return candidate;
  }
  if (fs.existsSync("/usr/bin/jupyter")) return "/usr/bin/jupyter";
  throw new Error("cannot find `jupyter` (on PATH or /usr/bin/jupyter); on Debian: apt-get install jupyter-client, or use --user / --prefix");
}

// sys.prefix of the Python in `jupyter`'s #! line (the one that will look for kernelspecs).
function jupyterSysPrefix(jupyter: string): string {
  const shebang = /^#!\s*(\S+)(?:\s+(\S+))?/.exec(fs.readFileSync(jupyter, "utf8").split("\n", 1)[0]);
  const python = shebang && (path.basename(shebang[1]) === "env" ? shebang[2] : shebang[1]);
  if (!python || !path.basename(python).startsWith("python")) {
    throw new Error(`${jupyter} is not a Python script (no #!python line); pass the real jupyter, or use --user / --prefix`);
  }
  return execFileSync(python, ["-c", "import sys; print(sys.prefix)"], { encoding: "utf8" }).trim();
}

/** The kernelspec folder a location designates. */
export function kernelSpecDir(location: KernelLocation = {}): string {
  const chosen = [location.user, location.sysPrefix, location.prefix !== undefined].filter(Boolean).length;
  if (chosen > 1) throw new Error("choose one of user, sysPrefix and prefix");
  const name = location.name ?? KERNEL_NAME;
  if (!/^[a-z0-9._-]+$/i.test(name)) throw new Error(`kernel name '${name}': use letters, digits, '.', '_' and '-' only`);
  let data: string;
  if (location.prefix !== undefined) data = path.join(path.resolve(location.prefix), "share", "jupyter");
  else if (location.sysPrefix) data = path.join(jupyterSysPrefix(location.jupyter ?? findJupyter()), "share", "jupyter");
  else data = jupyterDataDir();
  return path.join(data, "kernels", name);
}

/** How to start this kernel: compiled (dist/kernel/main.js), or from the sources through tsx. */
export function kernelArgv(): string[] {
  if (__filename.endsWith(".js")) return [process.execPath, path.join(__dirname, "main.js"), "{connection_file}"];
  const tsx = pathToFileURL(require.resolve("tsx")).href;
  return [process.execPath, "--import", tsx, path.join(__dirname, "main.ts"), "{connection_file}"];
}

/** Writes (or replaces) the kernelspec; returns its folder. */
export function installKernel(options: InstallOptions = {}): string {
  const dir = kernelSpecDir(options);
  const spec = {
    argv: kernelArgv(),
    display_name: options.displayName ?? DISPLAY_NAME,
    language: "typescript",
    // SIGINT stops a synchronous loop too; an interrupt_request message cannot reach a busy thread.
    interrupt_mode: "signal",
    env: options.env ?? {},
    metadata: { debugger: false },
  };
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "kernel.json"), JSON.stringify(spec, null, 2) + "\n");
  return dir;
}

/** Removes the kernelspec; returns the folder removed, or undefined if there was none. */
export function uninstallKernel(location: KernelLocation = {}): string | undefined {
  const dir = kernelSpecDir(location);
  if (!fs.existsSync(path.join(dir, "kernel.json"))) return undefined;
  fs.rmSync(dir, { recursive: true, force: true });
  return dir;
}
