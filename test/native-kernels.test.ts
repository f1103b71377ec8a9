// The CPU backend's SIMD row kernels against a scalar reference, and its thread pool, through the C++
// test binaries that `npm install` builds beside the addon (native/tools/dot_test.cpp, pool_test.cpp).
import { spawnSync } from "node:child_process";
import * as path from "node:path";
import { expect, test } from "vitest";

test("SIMD dot products and dequantisation match the scalar reference for every stored format", () => {
  const bin = path.join(__dirname, "..", "build", "native", "tools", "moelens-dot-test");
  const run = spawnSync(bin, { encoding: "utf8" });
  expect(run.error, `${bin} (run npm run build:native)`).toBeUndefined();
  expect(run.stdout).toMatch(/^0 failures$/m);
  expect(run.stdout.match(/ ok$/gm)?.length).toBeGreaterThanOrEqual(11);
  expect(run.status).toBe(0);
});

test("the thread pool runs every index once, lets idle threads take a busy share's chunks, spreads tasks, and runs loops inside tasks inline", () => {
  const bin = path.join(__dirname, "..", "build", "native", "tools", "moelens-pool-test");
  const run = spawnSync(bin, { encoding: "utf8", timeout: 60_000 });
  expect(run.error, `${bin} (run npm run build:native)`).toBeUndefined();
  expect(run.stdout).toMatch(/^0 failures$/m);
  expect(run.stdout.match(/ ok$/gm)?.length).toBe(20);
  expect(run.status).toBe(0);
});
