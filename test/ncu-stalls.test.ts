// bench/gpu/ncu-stalls.py: Nsight Compute's per-instruction samples (the SASS view as CSV) summed by
// stall reason, opcode and code region, on a listing written here in ncu's layout.
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, test } from "vitest";

const script = join(__dirname, "..", "bench", "gpu", "ncu-stalls.py");
const header = [
  "Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
  "Instructions Executed", "stall_barrier", "stall_long_sb", "stall_wait", "stall_long_sb (Not Issued)",
];
// [address, source, samples, executed, barrier, long_sb, wait]
type Instr = [string, string, number, number, number, number, number];

function listing(name: string, instrs: Instr[]): string {
  const q = (s: string | number) => `"${s}"`;
  const rows = instrs.map(([a, s, n, x, b, l, w]) => [a, `      ${s}`, n, n, x, b, l, w, l].map(q).join(","));
  return [`${q("Kernel Name")},${q(`ns::${name}(const unsigned char *, unsigned int)`)}`, header.map(q).join(","), ...rows].join("\n");
}

function run(csv: string, ...args: string[]) {
  const dir = mkdtempSync(join(tmpdir(), "ncu-stalls-"));
  const file = join(dir, "sass.csv");
  writeFileSync(file, csv);
  return spawnSync("python3", [script, file, ...args], { encoding: "utf8", timeout: 30_000 });
}

const loop: Instr[] = [
  ["0x7f0000", "S2R R0, SR_TID.X", 2, 100, 0, 0, 2],
  ["0x7f0010", "LDG.E.64 R4, desc[UR4][R2.64]", 0, 800, 0, 0, 0],
  ["0x7f0020", "HMMA.16816.F32 R8, R12, R4, R8", 30, 800, 0, 10, 20],
  ["0x7f0030", "@!P0 BRA 0x7f0010", 8, 800, 8, 0, 0],
  ["0x7f0040", "EXIT", 0, 100, 0, 0, 0],
];
const staging: Instr[] = [
  ["0x7f1000", "LDG.E R4, desc[UR4][R2.64]", 1, 64, 0, 0, 1],
  ["0x7f1010", "SEL R5, R4, R6, !P0", 9, 64, 0, 9, 0],
];

test("sums a launch's samples by reason, opcode and region, each launch once", () => {
  // ncu lists each launch twice in this view; the second kernel appears once.
  const csv = [listing("gemm_q4", loop), listing("gemm_q4", loop), listing("moe_down_tiled_q4_short", [...staging, ...loop])].join("\n");
  const r = run(csv, "--min-share", "10", "--top", "2");
  expect(r.status, r.stderr).toBe(0);
  const blocks = r.stdout.split("== ").slice(1);
  expect(blocks).toHaveLength(2);
  const [gemm, down] = blocks;
  expect(gemm).toContain("ns::gemm_q4: 5 instructions, 40 samples, 2600 warp instructions executed");
  expect(gemm).toContain("stall reasons: wait 55.0 %, long_sb 25.0 %, barrier 20.0 %");
  expect(gemm).toContain("executed: LDG 30.8 %, HMMA 30.8 %, BRA 30.8 %, S2R 3.8 %, EXIT 3.8 %");
  // The loop body (3 instructions run 800 times) holds 38 of 40 samples; the setup 2 (5 %, below 10 %).
  expect(gemm).toMatch(/7f0010\s+x800\s+3 instr\s+95\.0 %\s+\(LDG 1, HMMA 1, BRA 1\)/);
  expect(gemm).not.toMatch(/7f0000\s+x100/);
  expect(gemm).toMatch(/7f0020\s+75\.0 %\s+x800\s+HMMA\.16816\.F32 R8, R12, R4, R8\s+wait 20, long_sb 10/);
  expect(down).toMatch(/7f1000\s+x64\s+2 instr\s+20\.0 %/);
  expect(down).toMatch(/SEL R5, R4, R6, !P0\s+long_sb 9/);

  const only = run(csv, "--kernel", "moe_down");
  expect(only.status).toBe(0);
  expect(only.stdout.split("== ")).toHaveLength(2);
});

test("says what is wrong with its input", () => {
  const none = run(listing("gemm_q4", loop), "--kernel", "attention");
  expect(none.status).not.toBe(0);
  expect(none.stderr).toContain("no launch of 'attention'");
  const noSamples = run(listing("gemm_q4", loop).replace("Warp Stall Sampling (All Samples)", "Other"));
  expect(noSamples.status).not.toBe(0);
  expect(noSamples.stderr).toContain("no column 'Warp Stall Sampling (All Samples)'");
  expect(noSamples.stderr).toContain("--section SourceCounters");
  const missing = spawnSync("python3", [script, join(tmpdir(), "no-such-dir", "sass.csv")], { encoding: "utf8" });
  expect(missing.status).not.toBe(0);
  expect(missing.stderr).toContain("No such file");
});
