// Compiles bench/read-bandwidth.c on the fly (cc -O3 -march=native: it runs where it is built) and
// measures the read bandwidth the decode step competes for.
import { execFileSync } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

export interface ReadBandwidth {
  threads: number;
  mib: number;
  passes: number;
  best_gb_s: number;
  median_gb_s: number;
}

const SOURCE = path.join(__dirname, "read-bandwidth.c");

function compiled(workDir: string): string {
  const source = fs.readFileSync(SOURCE);
  const hash = crypto.createHash("sha256").update(source).digest("hex").slice(0, 12);
  const exe = path.join(workDir, `read-bandwidth-${hash}`);
  if (!fs.existsSync(exe)) {
    fs.mkdirSync(workDir, { recursive: true });
    const cc = process.env.CC ?? "cc";
    try {
      execFileSync(cc, ["-O3", "-march=native", "-pthread", SOURCE, "-o", exe], { stdio: ["ignore", "ignore", "pipe"] });
    } catch (e) {
      throw new Error(`compiling ${SOURCE} with ${cc} failed (set CC to a C compiler): ${(e as Error).message}`);
    }
  }
  return exe;
}

export function measureReadBandwidth(threads: number, workDir = path.join(os.tmpdir(), "moelens-bench")): ReadBandwidth {
  const out = execFileSync(compiled(workDir), ["--threads", String(threads), "--mib", "1024", "--passes", "10"], {
    encoding: "utf8",
  });
  return JSON.parse(out) as ReadBandwidth;
}
