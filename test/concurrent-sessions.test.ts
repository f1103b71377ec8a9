// Sessions of one model may run forward on different threads at once (each call is an async native
// worker). Their results must be those each gives alone: the CPU backend's reused work buffers are per
// thread, and its thread pool runs one parallel loop at a time.
import { beforeAll, expect, test } from "vitest";
import { load, type Model } from "moelens";
import { fixtureCases, get } from "./helpers/fixtures";

const t1 = fixtureCases().find((c) => c.name === "t1/mlx")!;
const prompt = Array.from(get(t1.ref, "p0.input_ids").data);

let model: Model;
beforeAll(async () => {
  model = await load(t1.modelDir);
});

// Different lengths, so that the shared buffers would be resized under one another.
const prompts = Array.from({ length: 8 }, (_, i) => prompt.slice(0, 4 + 5 * i));

async function run(ids: number[]): Promise<Float32Array> {
  const s = model.session();
  const prefill = await s.prefill(ids, { logits: "all" });
  const decode = await s.decode(ids[0]);
  s.dispose();
  const out = new Float32Array(prefill.logits.data.length + decode.logits.data.length);
  out.set(prefill.logits.data);
  out.set(decode.logits.data, prefill.logits.data.length);
  return out;
}

test("sessions running at once give the logits they give alone", async () => {
  const alone: Float32Array[] = [];
  for (const ids of prompts) alone.push(await run(ids));
  for (let round = 0; round < 3; round++) {
    const together = await Promise.all(prompts.map((ids) => run(ids)));
    together.forEach((logits, i) => expect(logits, `prompt ${i}, round ${round}`).toEqual(alone[i]));
  }
});
