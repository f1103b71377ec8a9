// The Metal backend end to end from JavaScript. On Linux the Metal host (objc_msgSend calls, runtime
// compilation of the embedded MSL, pipeline cache, one command buffer per forward call) runs against
// the mock Objective-C runtime, whose command buffers execute the kernels on the CPU emulator; so
// this checks binding indices, parameter structs, grid sizes and buffer lifetimes between host and
// kernels, against the CPU backend on every fixture. On a Mac it runs on the GPU. These checks use the
// exact precision ("fp32"); the fp16 prefill kernels have their own accuracy checks. With
// MOELENS_TEST_GPU_BACKEND (e.g. "cuda") the same checks run on that backend.
import { afterEach, describe, expect, test } from "vitest";
import { disableExperts, forceExperts, load, scaleSharedExpert, steer, type Model } from "moelens";
import { native } from "../sdk/native";
import { fixtureCases, get } from "./helpers/fixtures";
import { chosenGpuBackend, isBuilt } from "./helpers/gpu-backend";

const hasMetal = (native().backends() as string[]).includes("metal");
// Off macOS the Metal host runs over the mock runtime only when asked for by name.
const metal = { backend: "metal", emulator: process.platform !== "darwin" } as const;
const gpuOptions = chosenGpuBackend ? ({ backend: chosenGpuBackend } as const) : metal;
const gpuName = gpuOptions.backend;
const cases = fixtureCases();

// max |gpu - cpu| over each row, relative to the row's largest |cpu| value.
function expectRowsClose(gpu: Float32Array, cpu: Float32Array, width: number, tol: number, what: string) {
  expect(gpu.length, what).toBe(cpu.length);
  for (let r = 0; r < cpu.length / width; r++) {
    let worst = 0;
    let scale = 0;
    for (let i = r * width; i < (r + 1) * width; i++) {
      worst = Math.max(worst, Math.abs(gpu[i] - cpu[i]));
      scale = Math.max(scale, Math.abs(cpu[i]));
    }
    if (!(worst <= tol * scale)) throw new Error(`${what}: row ${r}: max |diff| ${worst} > ${tol} x ${scale}`);
  }
}

function argmax(a: Float32Array): number {
  let b = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[b]) b = i;
  return b;
}

afterEach(() => {
  delete process.env.MOELENS_EMU_ORDER;
});

test("the native build lists the metal backend", () => {
  expect(hasMetal).toBe(process.arch === "x64" || process.platform === "darwin");
});

test.runIf(process.platform !== "darwin")("off macOS, load refuses metal unless the emulator is asked for, and names the emulator backend", async () => {
  const { modelDir } = cases[0];
  await expect(load(modelDir, { backend: "metal" })).rejects.toThrow(
    `backend "metal": Metal needs macOS; on ${process.platform}, backend: "emulator" runs the same kernels on the CPU emulator, ` +
      `a test harness far slower than backend: "cpu" (add emulator: true to run the Metal host over it anyway)`,
  );
  await expect(load(modelDir, { backend: "cpu", emulator: true })).rejects.toThrow('emulator: true goes with backend: "metal"; got backend: "cpu"');
  await expect(load(modelDir, { emulator: true })).rejects.toThrow('emulator: true goes with backend: "metal"; got backend: "cpu"');
  const emulated = await load(modelDir, { backend: "emulator", precision: "fp32" });
  expect(emulated.info.backend).toBe("emulator");
  if (hasMetal) expect((await load(modelDir, { ...metal, precision: "fp32" })).info.backend).toBe("metal");
});

test("on macOS, emulator: true is refused: metal runs on the GPU there", async () => {
  const platform = Object.getOwnPropertyDescriptor(process, "platform")!;
  Object.defineProperty(process, "platform", { value: "darwin" });
  try {
    await expect(load(cases[0].modelDir, { backend: "metal", emulator: true })).rejects.toThrow(
      'emulator: true: on macOS backend "metal" runs on the GPU, not on the emulator',
    );
  } finally {
    Object.defineProperty(process, "platform", platform);
  }
});

describe.runIf(isBuilt(gpuName)).each(cases)(`${gpuName} on $name`, ({ modelDir, ref, prompts }) => {
  test("logits at every position and greedy decoding follow the CPU backend", async () => {
    const [cpu, gpu] = await Promise.all([load(modelDir, { backend: "cpu", threads: 1 }), load(modelDir, { ...gpuOptions, precision: "fp32" })]);
    expect(gpu.info).toBeDefined();
    const vocab = cpu.config.vocabSize;
    const ids = Array.from(get(ref, `${prompts[0]}.input_ids`).data).slice(0, 12);
    const sc = cpu.session();
    const sg = gpu.session();
    const rc = await sc.prefill(ids, { logits: "all" });
    const rg = await sg.prefill(ids, { logits: "all" });
    expectRowsClose(rg.logits.data, rc.logits.data, vocab, 1e-4, "prefill logits");

    let next = argmax(rc.logits.data.subarray((ids.length - 1) * vocab));
    expect(argmax(rg.logits.data.subarray((ids.length - 1) * vocab))).toBe(next);
    for (let step = 0; step < 8; step++) {
      const dc = await sc.decode(next);
      const dg = await sg.decode(next);
      expectRowsClose(dg.logits.data, dc.logits.data, vocab, 1e-4, `decode step ${step}`);
      const greedy = argmax(dc.logits.data);
      expect(argmax(dg.logits.data), `decode step ${step}`).toBe(greedy);
      next = greedy;
    }
    cpu.dispose();
    gpu.dispose();
  });

  test("decodeGreedy (the token stays on the device) chooses what the decode loop chooses", async () => {
    const [cpu, gpu] = await Promise.all([load(modelDir, { backend: "cpu", threads: 1 }), load(modelDir, { ...gpuOptions, precision: "fp32" })]);
    const vocab = cpu.config.vocabSize;
    const ids = Array.from(get(ref, `${prompts[0]}.input_ids`).data).slice(0, 10);
    const loop = cpu.session();
    let next = argmax((await loop.prefill(ids)).logits.data);
    const first = next;
    const want: number[] = [];
    for (let step = 0; step < 6; step++) want.push((next = argmax((await loop.decode(next)).logits.data)));
    for (const model of [cpu, gpu]) {
      const s = model.session();
      await s.prefill(ids);
      expect(await s.decodeGreedy(first, 6), model === cpu ? "cpu" : gpuName).toEqual(want);
      expect(s.position).toBe(ids.length + 6);
      // The state after it is the decode loop's: the next step's logits agree.
      const after = await s.decode(want[5]);
      expectRowsClose(after.logits.data, (await loop.fork().decode(want[5])).logits.data, vocab, 1e-4, "after decodeGreedy");
    }
    cpu.dispose();
    gpu.dispose();
  });
});

describe.runIf(isBuilt(gpuName))(`${gpuName}: traces, interventions, forks`, () => {
  const { modelDir, ref, prompts } = cases.find((c) => c.name === "t2/mlx") ?? cases[0];
  let cpu: Model;
  let gpu: Model;
  const prompt = () => Array.from(get(ref, `${prompts[0]}.input_ids`).data).slice(0, 8);

  test("captures match the CPU backend, in random thread order", async () => {
    process.env.MOELENS_EMU_ORDER = "random";
    [cpu, gpu] = await Promise.all([load(modelDir, { backend: "cpu", threads: 1 }), load(modelDir, { ...gpuOptions, precision: "fp32" })]);
    const attnLayer = cpu.config.layerTypes.indexOf("full_attention");
    const options = {
      logits: "all" as const,
      capture: ["router", "residual", "residual-mid", "deltanet", "attention-gate"] as const,
      attention: { layers: [attnLayer] },
    };
    const rc = await cpu.session().prefill(prompt(), { ...options, capture: [...options.capture] });
    const rg = await gpu.session().prefill(prompt(), { ...options, capture: [...options.capture] });
    const H = cpu.config.hiddenSize;
    expect(Array.from(rg.router!.ids.data)).toEqual(Array.from(rc.router!.ids.data));
    expectRowsClose(rg.router!.weights.data, rc.router!.weights.data, rc.router!.weights.shape.at(-1)!, 1e-4, "router weights");
    expectRowsClose(rg.router!.probs.data, rc.router!.probs.data, rc.router!.probs.shape.at(-1)!, 1e-4, "router probs");
    expectRowsClose(rg.router!.sharedGate.data, rc.router!.sharedGate.data, 1, 1e-4, "shared gate");
    expectRowsClose(rg.residual!.data, rc.residual!.data, H, 1e-4, "residual");
    expectRowsClose(rg.residualMid!.data, rc.residualMid!.data, H, 1e-4, "residual mid");
    expectRowsClose(rg.deltanet!.beta.data, rc.deltanet!.beta.data, 1, 1e-5, "deltanet beta");
    expectRowsClose(rg.deltanet!.decay.data, rc.deltanet!.decay.data, 1, 1e-5, "deltanet decay");
    expectRowsClose(rg.deltanet!.stateNorm.data, rc.deltanet!.stateNorm.data, 1, 1e-4, "deltanet state norm");
    expectRowsClose(rg.attention!.weights.data, rc.attention!.weights.data, rc.attention!.weights.shape.at(-1)!, 1e-4, "attention weights");
    expectRowsClose(rg.attentionGate!.values.data, rc.attentionGate!.values.data, rc.attentionGate!.values.shape.at(-1)!, 1e-5, "attention gate");
  });

  test("interventions act the same on both backends", async () => {
    const vocab = cpu.config.vocabSize;
    const E = cpu.config.numExperts;
    const direction = new Float32Array(cpu.config.hiddenSize).map((_, i) => Math.sin(i));
    const interventions = [
      disableExperts(0, [0, 1, 2]),
      forceExperts(1, [E - 1, E - 2]),
      scaleSharedExpert(0.5),
      steer(2, direction, 0.3),
    ];
    const rc = await cpu.session().prefill(prompt(), { logits: "all", capture: ["router"], interventions });
    const rg = await gpu.session().prefill(prompt(), { logits: "all", capture: ["router"], interventions });
    expect(Array.from(rg.router!.ids.data)).toEqual(Array.from(rc.router!.ids.data));
    expectRowsClose(rg.logits.data, rc.logits.data, vocab, 1e-4, "logits under interventions");
  });

  test("a fork continues like the original, and reset starts over", async () => {
    const vocab = cpu.config.vocabSize;
    const sg = gpu.session();
    const sc = cpu.session();
    await sg.prefill(prompt());
    await sc.prefill(prompt());
    const fork = sg.fork();
    const a = await sg.decode(5);
    const b = await fork.decode(5);
    const c = await sc.decode(5);
    expect(Array.from(b.logits.data)).toEqual(Array.from(a.logits.data));
    expectRowsClose(a.logits.data, c.logits.data, vocab, 1e-4, "decode after fork");
    sg.reset();
    const again = await sg.prefill(prompt(), { logits: "last" });
    const fresh = await gpu.session().prefill(prompt(), { logits: "last" });
    expect(Array.from(again.logits.data)).toEqual(Array.from(fresh.logits.data));
    cpu.dispose();
    gpu.dispose();
  });
});
