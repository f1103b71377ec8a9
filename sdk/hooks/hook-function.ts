// Hook functions: TypeScript that sees (and may replace) a hook point's value in the middle of a
// forward pass, like TransformerLens' run_with_hooks. The native forward runs on a worker thread and
// waits while the function runs on the main thread, so a hook must be synchronous.
import { Tensor } from "../tensor";

/** Where a hook function is called. */
export interface HookContext {
  /** The hook point: "blocks.2.deltanet.out". */
  name: string;
  /** Its layer (-1 for model-wide points). */
  layer: number;
  /** Absolute positions of the value's rows (calls longer than 512 tokens call the hook once per chunk of 512). */
  positions: number[];
}

/**
 * Receives the value ([n, ...dims], a copy) and returns a replacement of the same size, or undefined
 * to leave it (changing `value.data` in place and returning `value` works too). Throwing rejects the
 * call and leaves the session as it was before it.
 */
export type HookFunction = (value: Tensor<Float32Array>, context: HookContext) => Tensor<Float32Array> | Float32Array | undefined | void;

/** A hook function and the hook point name or pattern it is called at. */
export type Hook = [hook: string, fn: HookFunction];

/** The single function the native forward calls back, dispatching to the user's hooks. */
export function hookDispatcher(hooks: readonly Hook[]) {
  return (index: number, name: string, layer: number, shape: number[], position: number, values: Float32Array) => {
    const fn = hooks[index][1];
    const positions = Array.from({ length: shape[0] }, (_, i) => position + i);
    const out = fn(new Tensor(shape, values), { name, layer, positions });
    if (out === undefined) return undefined;
    if (out instanceof Tensor) return out.data;
    if (out instanceof Float32Array) return out;
    throw new TypeError(`hook '${hooks[index][0]}' at ${name} returned ${typeof out}; return a Tensor, a Float32Array or undefined`);
  };
}
