// bench/gpu/summary.sh: every figure of an h200-bench.sh output folder in one text, on files written
// here in the formats of moelens-gpu-check, moelens-gpu-bench (agree, prefill, speed) and llama-bench.
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, test } from "vitest";

const script = join(__dirname, "..", "bench", "gpu", "summary.sh");
const run = (...args: string[]) => spawnSync("bash", [script, ...args], { encoding: "utf8", timeout: 30_000 });

test("the summary keeps each figure and drops the logs around it", () => {
  const out = mkdtempSync(join(tmpdir(), "h200-summary-"));
  writeFileSync(join(out, "gpu.txt"), "name, memory.total [MiB]\nNVIDIA H200, 143771 MiB, 1980 MHz\n");
  writeFileSync(join(out, "gpu-check.txt"), "gemm_q4 shapes: 24x64 | ok\n51 kernels, 0 failing or untested, 0 failed cases, runtime cuda, 1.3 s\n");
  writeFileSync(join(out, "agree-fp16.txt"), "loading...\nt1/hf: teacher-forced top-1 99.22 % of 256 positions | FAIL\n");
  writeFileSync(
    join(out, "prefill.txt"),
    "loading /tmp/synth\nprompt  | fp16 tok/s | fp16 ms\nruntime, fp16, 512 tokens: 855 kernel launches\nfp16 runs, 512 tokens, tok/s: 17879.2 17766.0 (mean 17822.6)\n    512 |    17879.2 |   28.637 |\n  32768 |    19108.0 | 1714.882 |\n",
  );
  writeFileSync(
    join(out, "speed-4096.txt"),
    "loaded in 5.2 s\nprefill: 4096 tokens in 0.14 s\ndecode, token kept on the device: 128 tokens, 331.05 tok/s\ndecode reads 1.963 GB per token\nkernel launches per decoded token: 445.2\nruntime: 57000 kernel launches\n",
  );
  writeFileSync(
    join(out, "llama-bench.txt"),
    [
      "ggml_cuda_init: found 1 CUDA devices",
      "| model | size | test | t/s |",
      "| --- | --- | --- | --- |",
      '{"build_commit": "de3ff81", "n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 5069.46, "samples_ns": [ 121476000, 86425000 ],"samples_ts": [ 4214.9, 5924.02 ]}',
      "| qwen35moe Q4_0 | 18 GiB |           pp512 |    5069.46 ± 1208.59 |",
      '{"build_commit": "de3ff81", "n_prompt": 0, "n_gen": 128, "n_depth": 4096, "samples_ns": [ 1, 2, 3 ],"samples_ts": [ 245.1, 250.3, 252.32 ]}',
      "| qwen35moe Q4_0 | 18 GiB |   tg128 @ d4096 |        249.24 ± 4.63 |",
      "build: de3ff81 (1)",
      "",
    ].join("\n"),
  );
  writeFileSync(join(out, "steps.log"), "[1 s] built\n[90 s] speed at depth 32768 FAILED\n");
  const r = run(out);
  expect(r.status, r.stderr).toBe(0);
  const s = r.stdout;
  for (const line of [
    "NVIDIA H200, 143771 MiB",
    "51 kernels, 0 failing or untested, 0 failed cases",
    "Agreement with the CPU backend (fp16)",
    "t1/hf: teacher-forced top-1 99.22 %",
    "prompt  | fp16 tok/s",
    "    512 |    17879.2 |",
    "  32768 |    19108.0 |",
    "Decode (speed-4096)",
    "prefill: 4096 tokens",
    "331.05 tok/s",
    "decode reads 1.963 GB",
    "kernel launches per decoded token: 445.2",
    "| model | size | test | t/s |",
    "pp512 |    5069.46 ± 1208.59",
    "tg128 @ d4096 |        249.24 ± 4.63",
    "fp16 runs, 512 tokens, tok/s: 17879.2 17766.0 (mean 17822.6)",
    "llama.cpp's repetitions",
    "pp512, tok/s: 4214.90 5924.02 (best 5924.02, mean 5069.46)",
    "tg128 @ d4096, tok/s: 245.10 250.30 252.32 (best 252.32, mean 249.24)",
    "speed at depth 32768 FAILED",
  ])
    expect(s).toContain(line);
  for (const noise of ["loading", "runtime,", "gemm_q4 shapes", "ggml_cuda_init", "| --- |", "build: de3ff81", "[1 s] built", "build_commit"])
    expect(s).not.toContain(noise);
});

test("a missing folder or no argument is refused with the usage", () => {
  expect(run().status).toBe(2);
  expect(run().stderr).toMatch(/Usage: bench\/gpu\/summary.sh OUT_DIR/);
  const r = run(join(tmpdir(), "no-such-h200-bench-folder"));
  expect(r.status).toBe(2);
  expect(r.stderr).toMatch(/no folder/);
});
