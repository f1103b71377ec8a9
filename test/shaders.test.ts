// The GPU kernels on the CPU emulator of MSL (`npm run test:shaders`): every kernel function found in
// shaders/*.metal must pass against the CPU backend in the forward, reverse and random thread orders;
// the emulator must reject kernels that break the portable subset's rules; and the translator's lint
// must reject what Apple's compiler rejects but C++ accepts.
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { beforeAll, describe, expect, test } from "vitest";

const root = path.resolve(__dirname, "..");
const buildDir = path.join(root, "build", "shaders");
const shadersDir = path.join(root, "shaders");

function run(cmd: string, args: string[], timeoutMs = 120_000) {
  const r = spawnSync(cmd, args, { cwd: root, encoding: "utf8", timeout: timeoutMs });
  return { status: r.status, out: (r.stdout ?? "") + (r.stderr ?? "") };
}

// Kernel functions declared in the shader sources, found independently of the translator.
function kernelNames(): string[] {
  const names: string[] = [];
  for (const f of fs.readdirSync(shadersDir).filter((f) => f.endsWith(".metal"))) {
    const text = fs.readFileSync(path.join(shadersDir, f), "utf8");
    for (const m of text.matchAll(/\bkernel\s+void\s+(\w+)\s*\(/g)) names.push(m[1]);
  }
  return names;
}

let checkOutput = "";
let checkStatus: number | null = null;

beforeAll(() => {
  // Builds (incrementally) and runs both test binaries, as `npm run test:shaders` does.
  const r = run("bash", ["native/tools/test-shaders.sh"], 900_000);
  checkOutput = r.out;
  checkStatus = r.status;
}, 900_000);

describe("kernels on the emulator", () => {
  test("shaders/ has kernels", () => {
    expect(kernelNames().length).toBeGreaterThan(10);
  });

  // gpu.cmake compiles the translated shaders with clang in strict address-space mode when it finds
  // clang (CI installs clang-19); a failure there fails the build above.
  const hasClang = spawnSync("sh", ["-c", "command -v clang++-19 || command -v clang++"]).status === 0;
  test.runIf(hasClang)("every shader passes clang's strict address-space mode", () => {
    for (const f of fs.readdirSync(shadersDir).filter((f) => f.endsWith(".metal"))) {
      const stamp = path.join(buildDir, "shaders", f.replace(/\.metal$/, ".strict.stamp"));
      expect(fs.existsSync(stamp), `${stamp}\n${checkOutput}`).toBe(true);
    }
  });

  test("the emulator's self-test passes", () => {
    expect(checkOutput).toContain("emulator self-test passed");
  });

  test("every kernel matches the CPU backend in every thread order", () => {
    const lines = new Map<string, string>();
    for (const line of checkOutput.split("\n")) {
      const m = /^(\w+)\s+shapes: .*\| orders: (.*) \| (.*)$/.exec(line);
      if (m) lines.set(m[1], `${m[2]} | ${m[3]}`);
    }
    const problems: string[] = [];
    for (const name of kernelNames()) {
      const line = lines.get(name);
      if (!line) problems.push(`${name}: no line in the report`);
      else if (line !== "forward,reverse,random | ok") problems.push(`${name}: ${line}`);
    }
    expect(problems, checkOutput).toEqual([]);
    expect(checkStatus, checkOutput).toBe(0);
  });
});

describe("moelens-gpu-bench agree on the emulator", () => {
  test("the exact kernels give the CPU backend's top-1 as they run, route as it does, and again with its routing pinned", () => {
    const r = run(path.join(buildDir, "moelens-gpu-bench"), [
      "agree", "test/fixtures/t1/hf", "--backend", "emulator", "--precision", "fp32", "--positions", "24", "--decode", "2",
    ]);
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(
      /teacher-forced top-1 100\.00 % of 24 positions, 0 confident mismatches, .*; routing differs in 0 of 96 choices; with the reference's routing: top-1 100\.00 %, 0 confident mismatches, .* \| ok/,
    );
  });
});

describe("moelens-gpu-bench prefill on the emulator", () => {
  test("prints the routing each prompt length gave, within what top-k routing allows", () => {
    const n = 20;
    const r = run(path.join(buildDir, "moelens-gpu-bench"), [
      "prefill", "models/moelens-tiny", "--backend", "emulator", "--prompts", String(n), "--repeat", "1", "--compare-max", "0",
    ]);
    expect(r.status, r.out).toBe(0);
    const cfg = JSON.parse(fs.readFileSync(path.join(root, "models", "moelens-tiny", "config.json"), "utf8"));
    const text = cfg.text_config ?? cfg;
    const experts: number = text.num_experts, k: number = text.num_experts_per_tok;
    const m = new RegExp(
      `^routing, ${n} tokens: (\\d+)-(\\d+) of ${experts} experts used per layer, largest bucket (\\d+)-(\\d+) entries \\(mean ([\\d.]+)\\)$`,
      "m",
    ).exec(r.out);
    expect(m, r.out).not.toBeNull();
    const [usedLo, usedHi, largestLo, largestHi, mean] = m!.slice(1).map(Number);
    expect(mean).toBeCloseTo((n * k) / experts, 1);
    // Each token picks k distinct experts: at least k are used, a bucket holds at most n entries, and
    // the largest bucket is at least the mean.
    expect(usedLo).toBeGreaterThanOrEqual(k);
    expect(usedLo).toBeLessThanOrEqual(usedHi);
    expect(usedHi).toBeLessThanOrEqual(experts);
    expect(largestLo).toBeGreaterThanOrEqual(Math.ceil(mean));
    expect(largestLo).toBeLessThanOrEqual(largestHi);
    expect(largestHi).toBeLessThanOrEqual(n);
  });

  test.each([
    [["--repeat", "0"], /--repeat takes 1 or more/],
    [["--prompts", "512,x"], /--prompts takes a number, got 'x'/],
    [["--prompts", "0"], /--prompts takes token counts of 1 or more/],
  ])("refuses %j with a message naming the option", (args, message) => {
    const r = run(path.join(buildDir, "moelens-gpu-bench"), ["prefill", "models/moelens-tiny", "--backend", "emulator", ...args]);
    expect(r.status, r.out).toBe(2);
    expect(r.out).toMatch(message);
  });
});

describe("the lint of the portable MSL subset", () => {
  const cases: [string, string][] = [
    ["double", "kernel void k(device float* x [[buffer(0)]]) { double d = 1.0; x[0] = float(d); }"],
    ["virtual", "struct S { virtual float f() { return 1.0f; } };\nkernel void k(device float* x [[buffer(0)]]) { x[0] = 1.0f; }"],
    ["recursion", "inline float f(float v) { return v > 1.0f ? f(v - 1.0f) : v; }\nkernel void k(device float* x [[buffer(0)]]) { x[0] = f(3.0f); }"],
    ["new", "kernel void k(device float* x [[buffer(0)]]) { float* p = new float; x[0] = *p; }"],
    ["goto", "kernel void k(device float* x [[buffer(0)]]) { goto end; end: x[0] = 1.0f; }"],
    ["std::", "kernel void k(device float* x [[buffer(0)]]) { x[0] = std::max(1.0f, 2.0f); }"],
    ["mutable static", "kernel void k(device float* x [[buffer(0)]]) { static float s = 0.0f; s += 1.0f; x[0] = s; }"],
    ["function pointer", "inline float f(float v) { return v; }\nkernel void k(device float* x [[buffer(0)]]) { float (*g)(float) = f; x[0] = g(1.0f); }"],
  ];
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-lint-"));
  test.each(cases)("rejects %s", (_what, body) => {
    const file = path.join(tmp, "k.metal");
    fs.writeFileSync(file, `#include <metal_stdlib>\nusing namespace metal;\n${body}\n`);
    const r = run(path.join(buildDir, "msl-translate"), ["--out", tmp, file]);
    expect(r.status, r.out).toBe(1);
    expect(r.out).toMatch(/k\.metal:\d+: .*not in the portable MSL subset/);
  });

  test("MIN_RESIDENT_THREADGROUPS becomes __launch_bounds__' second argument and needs the threads attribute", () => {
    const kernel = "MIN_RESIDENT_THREADGROUPS(3) kernel void k(device float* x [[buffer(0)]]) { x[0] = 1.0f; }\n";
    const header = "#include <metal_stdlib>\nusing namespace metal;\n";
    const out = fs.mkdtempSync(path.join(tmp, "resident-"));
    const file = path.join(out, "resident.metal");
    fs.writeFileSync(file, header + "[[max_total_threads_per_threadgroup(64)]] " + kernel);
    const r = run(path.join(buildDir, "msl-translate"), ["--out", out, "--cuda", file]);
    expect(r.status, r.out).toBe(0);
    const cuda = fs.readFileSync(path.join(out, "resident.cu"), "utf8");
    expect(cuda).toMatch(/__launch_bounds__\(64, 3\) k\(/);
    expect(cuda).not.toMatch(/MIN_RESIDENT_THREADGROUPS/);
    expect(fs.readFileSync(path.join(out, "resident.emu.cpp"), "utf8")).not.toMatch(/MIN_RESIDENT_THREADGROUPS/);
    fs.writeFileSync(file, header + kernel);
    const bare = run(path.join(buildDir, "msl-translate"), ["--out", out, file]);
    expect(bare.status, bare.out).toBe(1);
    expect(bare.out).toMatch(/resident\.metal:3: kernel k: MIN_RESIDENT_THREADGROUPS follows/);
  });

  test("CUDA kernels take whether they let the next kernel launch early as their last argument", () => {
    const out = fs.mkdtempSync(path.join(tmp, "dependents-"));
    const file = path.join(out, "dependents.metal");
    fs.writeFileSync(
      file,
      "#include <metal_stdlib>\nusing namespace metal;\n" +
        "[[max_total_threads_per_threadgroup(64)]] kernel void k(device float* x [[buffer(0)]], constant uint& n [[buffer(1)]], " +
        "uint i [[thread_position_in_grid]]) { if (i < n) x[i] = 1.0f; }\n",
    );
    const r = run(path.join(buildDir, "msl-translate"), ["--out", out, "--cuda", file]);
    expect(r.status, r.out).toBe(0);
    const cuda = fs.readFileSync(path.join(out, "dependents.cu"), "utf8");
    expect(cuda).toMatch(/k\(float\* x, [^)]*, const uint msl_early_dependents\) \{/);
    expect(cuda).toMatch(/msl_cuda::await_previous_kernel\(msl_early_dependents\);/);
    // The describer binds it after the kernel's own arguments, from the call (the runtime sets it per launch).
    expect(cuda).toMatch(/call\.args\[call\.count\+\+\] = &call\.early_dependents;\n\}/);
    expect(fs.readFileSync(path.join(out, "dependents.emu.cpp"), "utf8")).not.toMatch(/early_dependents/);
  });

  test("a kernel that calls await_inputs() waits there, once, at the top level of its body", () => {
    const out = fs.mkdtempSync(path.join(tmp, "await-"));
    const file = path.join(out, "await.metal");
    const header = "#include <metal_stdlib>\nusing namespace metal;\n";
    const kernel = (body: string) =>
      "kernel void k(device const float* w [[buffer(0)]], device float* x [[buffer(1)]], uint i [[thread_position_in_grid]]) { " +
      body + " }\n";
    fs.writeFileSync(file, header + kernel("prefetch_l2(w, 64); await_inputs(); x[i] = w[i];"));
    const r = run(path.join(buildDir, "msl-translate"), ["--out", out, "--cuda", file]);
    expect(r.status, r.out).toBe(0);
    const cuda = fs.readFileSync(path.join(out, "await.cu"), "utf8");
    expect(cuda).not.toMatch(/msl_cuda::await_previous_kernel/);  // not in the prologue: the macro waits in place
    expect(cuda).toMatch(/prefetch_l2\(w, 64\); await_inputs\(\);/);
    const rejected: [string, RegExp][] = [
      ["if (i == 0u) { await_inputs(); } x[i] = w[i];", /await\.metal:3: kernel k: await_inputs\(\); belongs at the top level/],
      ["await_inputs(); await_inputs(); x[i] = w[i];", /await\.metal:3: kernel k: await_inputs\(\) called twice/],
    ];
    for (const [body, message] of rejected) {
      fs.writeFileSync(file, header + kernel(body));
      const bad = run(path.join(buildDir, "msl-translate"), ["--out", out, file]);
      expect(bad.status, bad.out).toBe(1);
      expect(bad.out).toMatch(message);
    }
    fs.writeFileSync(file, header + "inline void ready() { await_inputs(); }\n" + kernel("ready(); x[i] = w[i];"));
    const helper = run(path.join(buildDir, "msl-translate"), ["--out", out, file]);
    expect(helper.status, helper.out).toBe(1);
    expect(helper.out).toMatch(/await\.metal:3: await_inputs\(\) is called from a kernel's body, not from a function it calls/);
  });

  test("accepts a conforming kernel", () => {
    const file = path.join(tmp, "ok.metal");
    fs.writeFileSync(
      file,
      "#include <metal_stdlib>\nusing namespace metal;\ninline float twice(float v) { return 2.0f * v; }\n" +
        "kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = twice(x[i]); }\n",
    );
    const r = run(path.join(buildDir, "msl-translate"), ["--out", tmp, file]);
    expect(r.status, r.out).toBe(0);
  });
});
