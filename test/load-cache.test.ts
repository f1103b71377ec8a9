// load() returns the model a process already holds for the same folder and options.
import { expect, test } from "vitest";
import { load } from "moelens";
import { fixtureCases } from "./helpers/fixtures";

test("loading the same folder again reuses the model, unless fresh or disposed", async () => {
  const dir = fixtureCases().find((c) => c.name === "t1/hf")!.modelDir;
  const a = await load(dir);
  expect(await load(dir)).toBe(a);
  const fresh = await load(dir, { fresh: true });
  expect(fresh).not.toBe(a);
  expect(await load(dir, { threads: 2 })).not.toBe(await load(dir, { threads: 1 }));
  const b = await load(dir);
  b.dispose();
  const c = await load(dir);
  expect(c).not.toBe(b);
  expect((await c.session().prefill([1, 2, 3])).logits.shape).toEqual([1, c.config.vocabSize]);
});
