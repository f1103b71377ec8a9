// Loads the compiled core (build/native/Release/moelens.node) and describes its raw interface.
// The rest of the SDK wraps these objects; users never touch them directly.
import * as fs from "node:fs";
import * as path from "node:path";
import type { HookPoint } from "./hooks/hook-point";

export interface NativeIntervention {
  type: string;
  layer?: number;
  experts?: number[];
  positions?: number[];
  values?: Float32Array;
  scale?: number;
}

export interface NativeEdit {
  hook: string;
  op: string;
  positions?: number[];
  heads?: number[];
  channels?: number[];
  values?: Float32Array;
  scale?: number;
}

/** Called by the native forward for each hook point a hook pattern names; returns a replacement or undefined. */
export type NativeHookFunction = (
  index: number,
  name: string,
  layer: number,
  shape: number[],
  position: number,
  values: Float32Array,
) => Float32Array | undefined;

export interface NativeForwardOptions {
  logits?: "all" | "last" | "none";
  /** Hook point names or patterns. */
  capture?: string[];
  capturePositions?: number[];
  /** Heads kept of blocks.{l}.attn.probs. */
  attentionHeads?: number[];
  interventions?: NativeIntervention[];
  edits?: NativeEdit[];
  /** Hook point names or patterns at which hookFunction is called (with the index of the pattern). */
  hooks?: string[];
  hookFunction?: NativeHookFunction;
}

export interface NativeCapture {
  name: string;
  shape: number[];
  data: Float32Array | Int32Array;
}

export interface NativeForwardResult {
  n: number;
  position: number;
  logitsRows: number;
  logits: Float32Array;
  captures: NativeCapture[];
}

export interface NativeSession {
  forward(ids: Int32Array, options: NativeForwardOptions): Promise<NativeForwardResult>;
  decodeGreedy(first: number, steps: number, options: { interventions?: NativeIntervention[]; edits?: NativeEdit[] }): Promise<Int32Array>;
  reset(): void;
  fork(): NativeSession;
  cancel(): void;
  deltanetState(layer: number): { recurrent: Float32Array; conv: Float32Array };
  dispose(): void;
  readonly position: number;
  readonly memoryBytes: number;
}

export interface NativeConfig {
  modelType: string;
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  layerTypes: ("linear_attention" | "full_attention")[];
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  rotaryDim: number;
  ropeTheta: number;
  linearKeyHeads: number;
  linearValueHeads: number;
  linearKeyDim: number;
  linearValueDim: number;
  convKernel: number;
  numExperts: number;
  expertsPerToken: number;
  expertIntermediate: number;
  sharedIntermediate: number;
  rmsNormEps: number;
  maxPositionEmbeddings: number;
  eosTokenIds: number[];
}

export interface NativeInfo {
  dir: string;
  backend: string;
  /** "fp32" (exact), the CPU backend's integer-activation modes "int24" / "int16" / "int8", or the GPU backends' "fp16" (LoadOptions.precision). */
  precision: "fp32" | "fp16" | "int24" | "int16" | "int8";
  layout: "hf" | "mlx";
  weightBytes: number;
  quantized: boolean;
}

export interface NativeModel {
  config(): NativeConfig;
  info(): NativeInfo;
  session(): NativeSession;
  dispose(): void;
  unembed(rows: Float32Array, applyNorm: boolean): Promise<Float32Array>;
  hookPoints(): HookPoint[];
}

export interface NativeAddon {
  loadModel(
    dir: string,
    options: { backend?: string; threads?: number; precision?: string; prefillChunk?: number; prefillMinTokens?: number },
    onProgress?: (done: number, total: number) => void,
  ): Promise<NativeModel>;
  backends(): string[];
}

// The package root: the nearest folder above this file whose package.json is moelens's
// (sdk/ when run from sources, dist/sdk/ when compiled).
function findPackageRoot(start: string): string {
  for (let dir = start; ; dir = path.dirname(dir)) {
    const manifest = path.join(dir, "package.json");
    if (fs.existsSync(manifest) && JSON.parse(fs.readFileSync(manifest, "utf8")).name === "moelens") return dir;
    if (path.dirname(dir) === dir) throw new Error(`moelens: cannot find the package root above ${start}`);
  }
}

export const packageRoot = findPackageRoot(__dirname);

let addon: NativeAddon | undefined;

export function native(): NativeAddon {
  if (addon) return addon;
  const file = path.join(packageRoot, "build", "native", "Release", "moelens.node");
  if (!fs.existsSync(file)) {
    throw new Error(`moelens native core not built: ${file} is missing (run \`npm install\` or \`npm run build:native\`)`);
  }
  addon = require(file) as NativeAddon;
  return addon;
}
