// The `moelens` binary runs dist/: rebuild it when the sources are newer (CI builds it in `npm install`).
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";

export const root = path.resolve(__dirname, "..", "..");
export const bin = path.join(root, "bin", "moelens.js");

function newestSource(dir: string): number {
  let newest = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && e.name.endsWith(".ts")) newest = Math.max(newest, fs.statSync(path.join(e.parentPath, e.name)).mtimeMs);
  }
  return newest;
}

export function ensureBuiltCli(): void {
  const built = path.join(root, "dist", "sdk", "cli", "main.js");
  const stale = !fs.existsSync(built) || fs.statSync(built).mtimeMs < Math.max(newestSource(path.join(root, "sdk")), newestSource(path.join(root, "kernel")));
  if (stale) execFileSync(process.execPath, [path.join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"], { cwd: root });
}
