// Measures the read bandwidth the decode step competes for, with bench/read-bandwidth.c.
import { execFileSync } from "node:child_process";
import * as path from "node:path";
import { compiledHelper } from "./compile-c";

export interface ReadBandwidth {
  threads: number;
  mib: number;
  passes: number;
  best_gb_s: number;
  median_gb_s: number;
}

export function measureReadBandwidth(threads: number): ReadBandwidth {
  const exe = compiledHelper(path.join(__dirname, "read-bandwidth.c"));
  const out = execFileSync(exe, ["--threads", String(threads), "--mib", "1024", "--passes", "10"], { encoding: "utf8" });
  return JSON.parse(out) as ReadBandwidth;
}
