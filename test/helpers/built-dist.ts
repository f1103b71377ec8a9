// dist/ as the package ships it: rebuilt when a source of sdk/ or kernel/ is newer (CI builds it in
// `npm install`; a developer may have edited the sources since).
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";

function newestSource(dir: string): number {
  let newest = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && e.name.endsWith(".ts")) newest = Math.max(newest, fs.statSync(path.join(e.parentPath, e.name)).mtimeMs);
  }
  return newest;
}

export function ensureBuiltDist(root: string): void {
  const built = path.join(root, "dist", "sdk", "cli", "main.js");
  const stale = !fs.existsSync(built) || fs.statSync(built).mtimeMs < Math.max(newestSource(path.join(root, "sdk")), newestSource(path.join(root, "kernel")));
  if (stale) execFileSync(process.execPath, [path.join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"], { cwd: root });
}
