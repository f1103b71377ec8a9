// Brings an engine's weight files into the page cache before its timed runs (bench/page-in.c).
import { execFileSync } from "node:child_process";
import * as path from "node:path";
import { compiledHelper } from "./compile-c";

export interface PageIn {
  files: number;
  bytes: number;
  seconds: number;
}

// drop: evict the files first, so that all of them is read again in huge-page folios.
export function pageIn(files: string[], drop = false): PageIn {
  const exe = compiledHelper(path.join(__dirname, "page-in.c"));
  const out = execFileSync(exe, [...(drop ? ["--drop"] : []), ...files], { encoding: "utf8", maxBuffer: 1 << 20 });
  const { files: n, bytes, seconds } = JSON.parse(out) as PageIn;
  return { files: n, bytes, seconds };
}
