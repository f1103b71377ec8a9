// Loads the compiled core (build/native/Release/moelens.node) and describes its raw interface.
// The rest of the SDK wraps these objects; users never touch them directly.
import * as fs from "node:fs";
import * as path from "node:path";

export interface NativeIntervention {
  type: string;
  layer?: number;
  experts?: number[];
  positions?: number[];
  vector?: Float32Array;
  scale?: number;
}

export interface NativeForwardOptions {
  logits?: "all" | "last" | "none";
  router?: boolean;
  residual?: boolean;
  residualMid?: boolean;
  deltanet?: boolean;
  attentionGate?: boolean;
  attentionLayers?: number[];
  attentionHeads?: number[];
  interventions?: NativeIntervention[];
}

export interface NativeForwardResult {
  n: number;
  position: number;
  logitsRows: number;
  logits: Float32Array;
  routerLogits?: Float32Array;
  routerProbs?: Float32Array;
  routerIds?: Int32Array;
  routerWeights?: Float32Array;
  sharedGate?: Float32Array;
  residual?: Float32Array;
  residualMid?: Float32Array;
  deltanetBeta?: Float32Array;
  deltanetDecay?: Float32Array;
  deltanetStateNorm?: Float32Array;
  attentionGate?: Float32Array;
  attention?: Float32Array;
}

export interface NativeSession {
  forward(ids: Int32Array, options: NativeForwardOptions): Promise<NativeForwardResult>;
  decodeGreedy(first: number, steps: number, options: { interventions?: NativeIntervention[] }): Promise<Int32Array>;
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
}

export interface NativeAddon {
  loadModel(
    dir: string,
    options: { backend?: string; threads?: number; precision?: string; prefillChunk?: number },
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
