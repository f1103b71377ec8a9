// A fresh npm project outside the repository that installs moelens from an `npm pack` tarball with
// no network: its node_modules is seeded with the packages the repository's own `npm install` put in
// place (copied, with the hidden lockfile npm keeps beside them), so `npm install --offline` finds
// every dependency already satisfied and adds only moelens.
import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

interface LockEntry {
  version?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  dev?: boolean;
  devOptional?: boolean;
  [key: string]: unknown;
}

export function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): SpawnSyncReturns<string> {
  return spawnSync(command, args, { cwd, encoding: "utf8", timeout: 300_000, env: { ...process.env, ...env } });
}

/** `npm pack` of the repository (its dist/ must be built); returns the tarball's path. */
export function packRepository(root: string, into: string): string {
  const r = run("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", into], root);
  if (r.status !== 0) throw new Error(`npm pack failed: ${r.stderr}`);
  const [{ filename }] = JSON.parse(r.stdout) as { filename: string }[];
  return path.join(into, filename);
}

// The lockfile locations of `names` and of everything they depend on, as the repository installed them.
function closure(lock: Record<string, LockEntry>, names: string[]): string[] {
  const resolve = (from: string, name: string): string | undefined => {
    for (let base = from; ; ) {
      const candidate = `${base ? base + "/" : ""}node_modules/${name}`;
      if (lock[candidate]) return candidate;
      if (!base) return undefined;
      const cut = base.lastIndexOf("/node_modules/");
      base = cut < 0 ? "" : base.slice(0, cut);
    }
  };
  const seen = new Set<string>();
  const todo = names.map((n) => `node_modules/${n}`);
  while (todo.length > 0) {
    const location = todo.pop()!;
    if (seen.has(location) || !lock[location]) continue;
    seen.add(location);
    const e = lock[location];
    for (const dep of Object.keys({ ...e.dependencies, ...e.optionalDependencies, ...e.peerDependencies })) {
      const found = resolve(location, dep);
      if (found) todo.push(found);
    }
  }
  return [...seen].sort();
}

export interface FreshProject {
  dir: string;
  remove(): void;
}

/**
 * `npm init -y` in a new folder, `type` set, `devDependencies` pinned to the repository's versions,
 * then `npm install --offline <tarball>`. The install script (the native build with cmake-js, about
 * 90 s of CPU for the addon alone, several minutes on two busy cores) is skipped and the repository's
 * build of the addon, from the same sources, is copied in its place.
 */
export function freshProject(root: string, tarball: string, options: { type: "module" | "commonjs"; devDependencies: string[] }): FreshProject {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `moelens-fresh-${options.type}-`));
  const remove = () => fs.rmSync(dir, { recursive: true, force: true });
  try {
    const step = (args: string[]) => {
      const r = run("npm", args, dir);
      if (r.status !== 0) throw new Error(`npm ${args.join(" ")} failed in ${dir}:\n${r.stdout}\n${r.stderr}`);
      return r;
    };
    step(["init", "-y"]);
    step(["pkg", "set", `type=${options.type}`]);
    const rootManifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
    const lock = (JSON.parse(fs.readFileSync(path.join(root, "package-lock.json"), "utf8")) as { packages: Record<string, LockEntry> }).packages;
    for (const name of options.devDependencies) step(["pkg", "set", `devDependencies.${name}=${lock[`node_modules/${name}`].version}`]);

    const seeded = closure(lock, [...Object.keys(rootManifest.dependencies), ...options.devDependencies]).filter((l) => fs.existsSync(path.join(root, l)));
    for (const location of seeded) fs.cpSync(path.join(root, location), path.join(dir, location), { recursive: true, verbatimSymlinks: true });
    const bin = path.join(dir, "node_modules", ".bin");
    fs.mkdirSync(bin, { recursive: true });
    for (const link of fs.readdirSync(path.join(root, "node_modules", ".bin"))) {
      const target = fs.readlinkSync(path.join(root, "node_modules", ".bin", link));
      if (fs.existsSync(path.join(bin, target))) fs.symlinkSync(target, path.join(bin, link));
    }
    const packages = Object.fromEntries(seeded.map((l) => [l, (({ dev, devOptional, ...e }) => e)(lock[l])]));
    fs.writeFileSync(path.join(dir, "node_modules", ".package-lock.json"), JSON.stringify({ name: path.basename(dir), lockfileVersion: 3, requires: true, packages }));

    step(["install", "--offline", "--cache", path.join(dir, ".npm-cache"), "--no-audit", "--no-fund", "--ignore-scripts", tarball]);
    const addon = path.join("build", "native", "Release", "moelens.node");
    const installed = path.join(dir, "node_modules", "moelens");
    fs.mkdirSync(path.dirname(path.join(installed, addon)), { recursive: true });
    fs.copyFileSync(path.join(root, addon), path.join(installed, addon));
    return { dir, remove };
  } catch (e) {
    remove();
    throw e;
  }
}
