// bench/gpu/ab-tables.py: the tables bench/gpu/ab.sh prints, on rounds and profiles written here in the
// formats of `moelens-gpu-bench prefill`, `moelens-gpu-bench speed` and the CUDA profile.
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, test } from "vitest";

const script = join(__dirname, "..", "bench", "gpu", "ab-tables.py");
const run = (...args: string[]) => spawnSync("python3", [script, ...args], { encoding: "utf8", timeout: 30_000 });

const routing = (n: number, largest: string) =>
  `routing, ${n} tokens: 256-256 of 256 experts used per layer, largest bucket ${largest} entries (mean ${(n * 8) / 256}.0)`;
// One `moelens-gpu-bench prefill --prompts 512,4096` run: tok/s at 512 and 4,096 tokens.
const round = (a: number, b: number, largest512 = "31-45") =>
  [
    "prompt  | fp16 tok/s | fp16 ms  | TFLOP/s | of 989 | fp32 tok/s | fp16/fp32",
    "runtime, fp16, 512 tokens: 1 launches",
    routing(512, largest512),
    `    512 | ${a.toFixed(1).padStart(10)} |   30.000 |    80.0 |   8.1 % |          - |`,
    "runtime, fp16, 4096 tokens: 1 launches",
    routing(4096, "213-303"),
    `   4096 | ${b.toFixed(1).padStart(10)} |  150.000 |   130.0 |  13.1 % |          - |`,
  ].join("\n") + "\n";
const profile = (rows: [string, number, number][]) => {
  const line = ([k, n, ms]: [string, number, number]) =>
    `\n  ${k.padEnd(18)} ${String(n).padStart(8)} launches ${ms.toFixed(2).padStart(10)} ms GPU ${((1e3 * ms) / n).toFixed(2).padStart(8)} us each`;
  return `runtime, fp16, 512 tokens: 600 kernel launches; profiled (no graphs)${rows.map(line).join("")}\n`;
};

test("means: each build's mean over its rounds against the tree, and a build that routes otherwise marked", () => {
  const out = mkdtempSync(join(tmpdir(), "ab-"));
  writeFileSync(join(out, "tree-round1.txt"), round(17000, 27000));
  writeFileSync(join(out, "tree-round2.txt"), round(17200, 27200));
  writeFileSync(join(out, "variant1-round1.txt"), round(17850, 26000));
  writeFileSync(join(out, "variant1-round2.txt"), round(18050, 26200));
  writeFileSync(join(out, "variant2-round1.txt"), round(16000, 27100, "20-90"));
  writeFileSync(join(out, "variant2-round2.txt"), round(16200, 27100, "20-90"));
  const r = run("means", out, "2", "tree", "variant1", "variant2");
  expect(r.status, r.stderr).toBe(0);
  expect(r.stdout).toMatch(/^tree\s+\|\s+17100\.0 \|\s+27100\.0 \| \+0\.0 % \+0\.0 %$/m);
  expect(r.stdout).toMatch(/^variant1\s+\|\s+17950\.0 \|\s+26100\.0 \| \+5\.0 % -3\.7 %$/m);
  expect(r.stdout).toMatch(/^variant2\s+\|\s+16100\.0 \|\s+27100\.0 \| -5\.8 % \+0\.0 %$/m);
  const at512 = r.stdout.slice(r.stdout.indexOf("routing at 512"), r.stdout.indexOf("routing at 4096"));
  expect(at512).toMatch(/variant2 .*largest bucket 20-90 .*<- routes otherwise than the tree/);
  expect(at512).not.toMatch(/variant1 .*<- routes otherwise/);
  expect(r.stdout.slice(r.stdout.indexOf("routing at 4096"))).not.toContain("routes otherwise");
});

// One `moelens-gpu-bench speed --decode 128` run: its device loop's tok/s and digest, and its launches.
const speed = (tokS: number, digest: string, launches = "445.2") =>
  [
    "decode, logits read back each step: 128 tokens, 400.00 tok/s (median step 2.500 ms, min 2.400 ms)",
    `decode, token kept on the device: 128 tokens, ${tokS.toFixed(2)} tok/s (2.000 ms per token), digest ${digest}, same tokens as the read-back loop`,
    `kernel launches per decoded token: ${launches}`,
  ].join("\n") + "\n";

test("decode: each build's mean tok/s after each prompt length against the tree, other tokens marked", () => {
  const out = mkdtempSync(join(tmpdir(), "ab-"));
  for (const [name, r, t256, t4096, digest] of [
    ["tree", 1, 460, 440, "89dddd284920c1f7"],
    ["tree", 2, 470, 444, "89dddd284920c1f7"],
    ["variant1", 1, 506, 430, "89dddd284920c1f7"],
    ["variant1", 2, 528, 438, "89dddd284920c1f7"],
    ["variant2", 1, 465, 442, "0123456789abcdef"],
    ["variant2", 2, 465, 442, "0123456789abcdef"],
  ] as const) {
    writeFileSync(join(out, `${name}-decode256-round${r}.txt`), speed(t256, digest, name === "tree" ? "455.2" : "445.2"));
    writeFileSync(join(out, `${name}-decode4096-round${r}.txt`), speed(t4096, digest));
  }
  const r = run("decode", out, "2", "256,4096", "tree", "variant1", "variant2");
  expect(r.status, r.stderr).toBe(0);
  expect(r.stdout).toMatch(/^tree\s+\|\s+465\.0 \|\s+442\.0 \| \+0\.0 % \+0\.0 %$/m);
  expect(r.stdout).toMatch(/^variant1\s+\|\s+517\.0 \|\s+434\.0 \| \+11\.2 % -1\.8 %$/m);
  const at256 = r.stdout.slice(r.stdout.indexOf("decode after 256 tokens"), r.stdout.indexOf("decode after 4096 tokens"));
  expect(at256).toMatch(/^\s+tree\s+89dddd284920c1f7 455\.2$/m);
  expect(at256).toMatch(/^\s+variant1\s+89dddd284920c1f7 445\.2$/m);
  expect(at256).toMatch(/variant2\s+0123456789abcdef 445\.2\s+<- other tokens than the tree/);
  expect(r.stdout).not.toMatch(/variant1 .*<- other tokens/);
  const missing = run("decode", mkdtempSync(join(tmpdir(), "ab-")), "1", "256", "tree");
  expect(missing.status).not.toBe(0);
  expect(missing.stderr).toContain("no timed decode rounds of the tree");
});

test("kernels: µs per launch of the main kernels by build, and each build's total", () => {
  const out = mkdtempSync(join(tmpdir(), "ab-"));
  writeFileSync(join(out, "tree-profile.txt"), profile([["moe_gate_up", 40, 7.4], ["gemm_q4", 81, 6.0], ["tiny", 10, 0.01]]));
  writeFileSync(join(out, "variant1-profile.txt"), profile([["moe_gate_up", 40, 8.0], ["gemm_q4", 81, 5.67], ["tiny", 10, 0.01]]));
  const r = run("kernels", out, "tree", "variant1");
  expect(r.status, r.stderr).toBe(0);
  expect(r.stdout).toMatch(/^\s+moe_gate_up\s+x40\s+\|\s+185\.0 \|\s+200\.0$/m);
  expect(r.stdout).toMatch(/^\s+gemm_q4\s+x81\s+\|\s+74\.1 \|\s+70\.0$/m);
  expect(r.stdout).not.toContain("tiny");  // under 1 % of every build's time
  expect(r.stdout).toMatch(/all kernels, ms\s+\|\s+13\.41 \|\s+13\.68$/m);
  expect(r.stdout.indexOf("moe_gate_up")).toBeLessThan(r.stdout.indexOf("gemm_q4"));
});

test("says what is missing", () => {
  const empty = mkdtempSync(join(tmpdir(), "ab-"));
  const means = run("means", empty, "2", "tree");
  expect(means.status).not.toBe(0);
  expect(means.stderr).toContain("no timed rounds of the tree");
  const kernels = run("kernels", empty, "tree");
  expect(kernels.status).not.toBe(0);
  expect(kernels.stderr).toContain("no profile of the tree");
  const usage = run("sum");
  expect(usage.status).toBe(2);
  expect(usage.stderr).toContain("ab-tables.py means OUT ROUNDS BUILD");
});
