// Notebook views by data type: a view registered for a class draws its instances and those of its
// subclasses; the SDK's data types have theirs once the package is loaded.
import { expect, test } from "vitest";
import { ExpertLoad, Tensor } from "moelens";
import { registerView, viewMimeBundle } from "../sdk/display/views";

test("a registered view draws its class and subclasses; a class without one shows its name", () => {
  class Base {
    constructor(readonly n: number) {}
  }
  class Derived extends Base {}
  class Own extends Base {}
  class Unseen {}
  registerView(Base, (b) => ({ "text/plain": `base ${b.n}` }));
  registerView(Own, (o) => ({ "text/plain": `own ${o.n}` }));
  expect(viewMimeBundle(new Base(1))).toEqual({ "text/plain": "base 1" });
  expect(viewMimeBundle(new Derived(2))).toEqual({ "text/plain": "base 2" });
  expect(viewMimeBundle(new Own(3))).toEqual({ "text/plain": "own 3" });
  expect(viewMimeBundle(new Unseen())).toEqual({ "text/plain": "<Unseen>" });
});

test("the SDK's data types draw through their registered views", () => {
  expect(new Tensor([2], Float32Array.from([1, 2])).toMimeBundle()["text/plain"]).toBe("Tensor float32 [2]\n[1.0000, 2.0000]");
  const load = new ExpertLoad(1, 4, 2);
  expect(load.toMimeBundle()["text/plain"]).toMatch(/^ExpertLoad: 0 tokens, 1 layers, top-2 of 4 experts/);
});
