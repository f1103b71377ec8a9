// The backend the GPU suites run on. By default each suite uses its own: the CPU emulator of the
// kernels, or the Metal host (on Linux over the mock runtime, which runs the same emulator). With
// MOELENS_TEST_GPU_BACKEND set (e.g. "cuda" on a machine with an NVIDIA GPU and a CUDA build) they all
// run on that backend instead, with the tolerances they use for the emulator at the same precision:
// the kernels are the same source. The end-to-end suites whose model is on the CPU (transformers
// parity, generation) then load it on that backend too, at its exact precision (fp32).
import type { BackendName } from "moelens";
import { native } from "../../sdk/native";

const VARIABLE = "MOELENS_TEST_GPU_BACKEND";

/** The GPU backend `value` (the variable's value) names, checked against the backends of the build. */
export function resolveGpuBackend(value: string | undefined, built: string[]): BackendName | undefined {
  const name = value;
  if (name === undefined || name === "") return undefined;
  if (name === "cpu" || !built.includes(name)) {
    const gpus = built.filter((b) => b !== "cpu").join(", ");
    const hint = name === "cuda" ? " (build the CUDA backend with MOELENS_CUDA=1 npm run build:native)" : "";
    throw new Error(`${VARIABLE}=${name}: not a GPU backend of this build (it has: ${gpus})${hint}`);
  }
  return name as BackendName;
}

/** The backend named by MOELENS_TEST_GPU_BACKEND, or undefined when it is unset. */
export const chosenGpuBackend = resolveGpuBackend(process.env[VARIABLE], native().backends() as string[]);

/** The backend a GPU suite runs on: the chosen one, else the suite's own default. */
export function gpuBackend(suiteDefault: BackendName): BackendName {
  return chosenGpuBackend ?? suiteDefault;
}

/**
 * The prefillMinTokens the prompt-path suites load their GPU models with: the tiled kernels from 16
 * tokens, as the kernel cases (moelens-gpu-check) run them, rather than from the default threshold
 * (PREFILL_MIN_TOKENS, measured for the full-shape model).
 */
export const TILED_FROM = 16;

/** Whether `name` is in this build (`backends()` of the addon). */
export function isBuilt(name: BackendName): boolean {
  return (native().backends() as string[]).includes(name);
}

/**
 * The backends the prompt-path suites run on: the chosen one, else the CPU emulator of the kernels
 * and, on a Mac with Metal, its GPU (on Linux the metal backend is the mock runtime over the same
 * emulator, so it adds nothing).
 */
export function promptPathBackends(): BackendName[] {
  if (chosenGpuBackend) return [chosenGpuBackend];
  return ["emulator", ...(process.platform === "darwin" && isBuilt("metal") ? (["metal"] as const) : [])];
}
