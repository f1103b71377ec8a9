// MOELENS_TEST_GPU_BACKEND, which runs the GPU suites on a chosen backend (test/helpers/gpu-backend.ts):
// unset it changes nothing; set, it must name a GPU backend of the build, or the suites stop at once
// with an error that says what the build has.
import { expect, test } from "vitest";
import { resolveGpuBackend } from "./helpers/gpu-backend";

const built = ["cpu", "emulator", "metal"];

test("unset or empty, each suite keeps its own backend", () => {
  expect(resolveGpuBackend(undefined, built)).toBeUndefined();
  expect(resolveGpuBackend("", built)).toBeUndefined();
});

test("a GPU backend of the build is chosen", () => {
  expect(resolveGpuBackend("emulator", built)).toBe("emulator");
  expect(resolveGpuBackend("cuda", [...built, "cuda"])).toBe("cuda");
});

test("a backend the build lacks, or the CPU, is an error naming the variable and the build's GPU backends", () => {
  expect(() => resolveGpuBackend("cuda", built)).toThrow(
    "MOELENS_TEST_GPU_BACKEND=cuda: not a GPU backend of this build (it has: emulator, metal) (build the CUDA backend with MOELENS_CUDA=1 npm run build:native)",
  );
  expect(() => resolveGpuBackend("cpu", built)).toThrow("MOELENS_TEST_GPU_BACKEND=cpu: not a GPU backend of this build (it has: emulator, metal)");
  expect(() => resolveGpuBackend("vulkan", built)).toThrow(/MOELENS_TEST_GPU_BACKEND=vulkan: not a GPU backend/);
});
