// Compiles one of bench/'s C helpers on the fly (cc -O3 -march=native: it runs where it is built), once
// per source version, into a scratch folder.
import { execFileSync } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

export function compiledHelper(source: string, workDir = path.join(os.tmpdir(), "moelens-bench")): string {
  const text = fs.readFileSync(source);
  const hash = crypto.createHash("sha256").update(text).digest("hex").slice(0, 12);
  const exe = path.join(workDir, `${path.basename(source, ".c")}-${hash}`);
  if (!fs.existsSync(exe)) {
    fs.mkdirSync(workDir, { recursive: true });
    const cc = process.env.CC ?? "cc";
    try {
      execFileSync(cc, ["-O3", "-march=native", "-pthread", source, "-o", exe], { stdio: ["ignore", "ignore", "pipe"] });
    } catch (e) {
      throw new Error(`compiling ${source} with ${cc} failed (set CC to a C compiler): ${(e as Error).message}`);
    }
  }
  return exe;
}
