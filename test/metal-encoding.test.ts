// How the Metal host encodes a forward call (native/backends/gpu/metal/metal_runtime.cpp): within a
// command buffer's encoder it sends only the state that changes (the pipeline, buffer bindings,
// parameters), consecutive changed bindings in one message. On Linux the host runs against the mock
// Objective-C runtime, which keeps each encoder's bindings as Metal does and runs the kernels on the
// CPU emulator; on a Mac, against Metal. MOELENS_METAL_ELIDE=0 sends every call of every dispatch,
// for comparison; MOELENS_METAL_STATS=1 prints the host's counts when the runtime closes.
import { spawnSync } from "node:child_process";
import * as path from "node:path";
import { afterEach, describe, expect, test } from "vitest";
import { load } from "moelens";
import { native } from "../sdk/native";
import { fixtureCases, get } from "./helpers/fixtures";

const hasMetal = (native().backends() as string[]).includes("metal");
const metal = { backend: "metal", emulator: process.platform !== "darwin" } as const;
const { modelDir, ref, prompts } = fixtureCases().find((c) => c.name === "t1/mlx")!;
const runTool = path.join(__dirname, "..", "build", "native", "tools", "moelens-run");

afterEach(() => {
  delete process.env.MOELENS_METAL_ELIDE;
});

interface HostCounts {
  tokens: number[];
  dispatches: number;
  commandBuffers: number;
  messages: number;
  ranges: number;
  rangeBindings: number;
  offsetCalls: number;
  elided: number;
}

// moelens-run (the core without Node) on the Metal backend: a prompt of 6 tokens, 4 decode steps
// (each step one command buffer), with the runtime's counts printed when it closes.
function runWithStats(elide: "0" | "1"): HostCounts {
  const r = spawnSync(runTool, [modelDir, "--backend", "metal", "--prompt", "6", "--decode", "4"], {
    encoding: "utf8",
    timeout: 120_000,
    env: { ...process.env, MOELENS_METAL_STATS: "1", MOELENS_METAL_ELIDE: elide },
  });
  expect(r.error, `${runTool} (run npm run build:native)`).toBeUndefined();
  expect(r.status, r.stderr).toBe(0);
  const m =
    /moelens metal: (\d+) dispatches in (\d+) command buffers; (\d+) Objective-C messages to encode and commit them \((\d+) setBuffers:offsets:withRange: carrying (\d+) bindings, (\d+) setBufferOffset:atIndex:\), (\d+) calls elided/.exec(
      r.stderr,
    );
  expect(m, r.stderr).not.toBeNull();
  const [dispatches, commandBuffers, messages, ranges, rangeBindings, offsetCalls, elided] = m!.slice(1).map(Number);
  return { tokens: JSON.parse(r.stdout).tokens, dispatches, commandBuffers, messages, ranges, rangeBindings, offsetCalls, elided };
}

describe.runIf(hasMetal)("the Metal host's encoding", () => {
  test("forward calls send under 40 % of the messages of one call per binding, and decode the same tokens", () => {
    const plain = runWithStats("0");
    const elided = runWithStats("1");
    expect(elided.tokens).toEqual(plain.tokens);
    expect(elided.dispatches).toBe(plain.dispatches);
    expect(plain.commandBuffers).toBe(5); // the prompt, then one per decode step
    expect(elided.commandBuffers).toBe(5);
    // Without elision: per dispatch the pipeline, each binding, the parameters, the dispatch itself
    // (on this model about 13 messages); nothing elided, batched or offset-only.
    expect([plain.elided, plain.ranges, plain.offsetCalls]).toEqual([0, 0, 0]);
    expect(plain.messages / plain.dispatches).toBeGreaterThan(10);
    // With it: bindings already in place are skipped, the changed ones go several to a message, and
    // attention reads the KV cache from its first row at the index where the step's row was just
    // written (setBufferOffset:atIndex:).
    expect(elided.elided).toBeGreaterThan(0);
    expect(elided.rangeBindings).toBeGreaterThan(4 * elided.ranges);
    expect(elided.offsetCalls).toBeGreaterThan(0);
    expect(elided.messages / elided.dispatches).toBeLessThan(5);
    expect(elided.messages * 2.5).toBeLessThan(plain.messages);
  });

  test("logits, captures and greedy tokens are bit-identical with every call sent (MOELENS_METAL_ELIDE=0)", async () => {
    const ids = Array.from(get(ref, `${prompts[0]}.input_ids`).data).slice(0, 10);
    async function run(elide: "0" | "1") {
      process.env.MOELENS_METAL_ELIDE = elide;
      const model = await load(modelDir, { ...metal, precision: "fp32" });
      try {
        const s = model.session();
        const prefill = await s.prefill(ids, { logits: "all", capture: ["router", "residual"] });
        const decode = await s.decode(7);
        const greedy = await s.decodeGreedy(11, 4);
        return [prefill.logits.data, prefill.router!.probs.data, prefill.residual!.data, decode.logits.data, new Float32Array(greedy)];
      } finally {
        model.dispose();
      }
    }
    const plain = await run("0");
    const elided = await run("1");
    for (let i = 0; i < plain.length; i++) {
      expect(elided[i].length, `output ${i}`).toBe(plain[i].length);
      const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
      expect(bytes(elided[i]).equals(bytes(plain[i])), `output ${i}`).toBe(true);
    }
  });

  test("a MOELENS_METAL_ELIDE that is not a switch is refused by name", async () => {
    process.env.MOELENS_METAL_ELIDE = "yes";
    await expect(load(modelDir, { ...metal, precision: "fp32" })).rejects.toThrow("metal: MOELENS_METAL_ELIDE=yes is not a switch (1 or 0)");
  });
});
