// load(dir, { backend: "cuda" }) in every kind of build: where the addon was built without CUDA the
// error says how to build it; built with CUDA on a machine without an NVIDIA driver, it names the
// missing device; with one, the model loads and runs on the GPU.
import * as fs from "node:fs";
import { expect, test } from "vitest";
import { embeddedModelDir, load } from "moelens";
import { isBuilt } from "./helpers/gpu-backend";

const hasDriver = fs.existsSync("/proc/driver/nvidia/version");

test("the cuda backend loads where the build and the machine have it, and says why not elsewhere", async () => {
  const loading = load(embeddedModelDir, { backend: "cuda", fresh: true });
  if (!isBuilt("cuda")) {
    await expect(loading).rejects.toThrow(/^this build has no cuda backend \(it has: cpu, emulator.*\); build it where nvcc is, with MOELENS_CUDA=1 npm install/);
  } else if (!hasDriver) {
    await expect(loading).rejects.toThrow(/^cuda: no CUDA device/);
  } else {
    const model = await loading;
    expect(model.info.backend).toBe("cuda");
    const r = await model.session().prefill([1, 2, 3], { logits: "last" });
    expect(r.logits.data.length).toBe(model.config.vocabSize);
    expect(r.logits.data.every(Number.isFinite)).toBe(true);
    model.dispose();
  }
});
