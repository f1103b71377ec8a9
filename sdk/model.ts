// Loading a checkpoint directory and opening sessions on it.
import * as fs from "node:fs";
import * as path from "node:path";
import type { ModelConfig } from "./config";
import { native, packageRoot, type NativeInfo, type NativeModel } from "./native";
import { Session } from "./session";
import type { HookPoint } from "./hooks/hook-point";
import { hookPointsOf } from "./hooks/patterns";
import { Conversation, type ConversationOptions } from "./chat/conversation";
import type { GenerationContext } from "./generate/generate";
import { loadGenerationConfig, type GenerationConfig } from "./generate/generation-config";
import { loadTokenizer, type Tokenizer } from "./tokenizer/tokenizer";

/** "cpu" is the reference. "emulator" runs the GPU backend's kernels on the CPU emulator (for tests:
 * slow). "metal" and "cuda" exist where the native build has them (`backends()` of the addon lists
 * them). Off macOS, "metal" runs the Metal host over a mock Objective-C runtime on the same CPU
 * emulator, so `load` refuses it unless `emulator: true` asks for that. */
export type BackendName = "cpu" | "emulator" | "metal" | "cuda";

/** How activations enter the matmuls.
 *
 * The CPU backend, for MLX-quantized (4/8-bit) weights: "fp32" (default): fp32
 * activations, exact, the configuration the parity tests check. "int24": the activations as 22-bit
 * integers per block of 32 (three int8 planes) and integer dot products; rounding of the order of fp32's,
 * checked by the same parity tests, faster in decode. "int8": activations quantized to int8 in blocks of
 * 32 (as llama.cpp's Q8_0); fastest, reduced precision. "int16": two planes, close to fp32 but not within
 * the parity tolerance. See docs/performance.md, "Integer activations". Dense (bf16/f16/f32) weights
 * are fp32 in every mode.
 *
 * The GPU backends: "fp32" (default): every call on the exact kernels, within 1e-4 of the CPU backend's
 * logits. "fp16": prompt chunks on the tiled matrix kernels (fp16 operands, fp32 accumulation), several
 * times faster at long prompts, decode's 4-bit projections and experts' gate/up on activations
 * quantized to int16 in blocks of 32 (the CPU's "int16" rounding, integer products) and its attention on
 * the matrix units (fp16 operands); reduced precision. See docs/metal.md, "Precision", "Decode in int16"
 * and "Decode attention at depth". */
export const precisions = ["fp32", "fp16", "int24", "int16", "int8"] as const;
export type Precision = (typeof precisions)[number];

export interface LoadOptions {
  /** Compute backend (default "cpu"). */
  backend?: BackendName;
  /** With backend "metal" off macOS: run the Metal host over its mock runtime on the CPU emulator of the
   * kernels (a test harness of the host code, far slower than "cpu"). Without it that is refused. */
  emulator?: boolean;
  /** CPU threads (default: all cores, or 1 for checkpoints under 64 MB, where handing rows to other threads costs more than it saves). */
  threads?: number;
  /** Matmul precision (see `precisions`): cpu "fp32" (default, exact), "int24", "int16", "int8"; gpu "fp32" (default, exact) or "fp16" (fast prompts and decode, reduced precision). */
  precision?: Precision;
  /** Tokens per forward chunk of a long prompt (default: 512 on the CPU, 4,096 on a GPU): scratch memory
   * grows with it, and a GPU reads each expert's weights once per chunk. Results do not depend on it. */
  prefillChunk?: number;
  /** GPU backends at precision "fp16": calls of at least this many tokens run on the tiled (matrix-unit)
   * prompt kernels, shorter ones on the decode kernels (int16 activations for 4-bit weights). Default:
   * the measured crossover, PREFILL_MIN_TOKENS (4); set it higher to keep short prompts on the decode
   * kernels, or 1 to tile every call. */
  prefillMinTokens?: number;
  /** Load again even if this process already holds the model (e.g. after its files changed). */
  fresh?: boolean;
  /** Called as layers are placed on the backend. */
  onProgress?: (done: number, total: number) => void;
}

/** The directory of the small model that ships with the package. */
export const embeddedModelDir = path.join(packageRoot, "models", "moelens-tiny");

export class Model {
  readonly config: ModelConfig;
  readonly info: NativeInfo;
  /** The checkpoint's tokenizer (undefined when the folder has no tokenizer.json). */
  readonly tokenizer: Tokenizer | undefined;
  /** Eos ids and default sampling (generation_config.json). */
  readonly generationConfig: GenerationConfig;

  /** @internal */
  constructor(
    private readonly native: NativeModel,
    readonly dir: string,
    tokenizer?: Tokenizer,
  ) {
    this.config = native.config();
    this.info = native.info();
    this.tokenizer = tokenizer;
    const tokenizerEos = tokenizer?.eosTokenId === undefined ? [] : [tokenizer.eosTokenId];
    this.generationConfig = loadGenerationConfig(dir, [...this.config.eosTokenIds, ...tokenizerEos]);
  }

  /**
   * Every hook point of this model, in forward order: the names that `capture`, `edits` and `hooks`
   * take, with shape, dtype and meaning (docs/hooks.md).
   */
  hookPoints(): HookPoint[] {
    return hookPointsOf(this.native).map((p) => ({ ...p, dims: [...p.dims], shape: [...p.shape] }));
  }

  /** A new, empty session (position 0). */
  session(): Session {
    return new Session(this.native.session(), { config: this.config, native: this.native, generation: this.generation });
  }

  /** A multi-turn chat on a new session, re-feeding only what each turn adds (needs a chat template). */
  conversation(options: ConversationOptions = {}): Conversation {
    const generation = this.generation;
    if (!generation) throw new Error(`${this.dir}: no tokenizer.json, so no conversation`);
    return new Conversation(this.session(), generation, options);
  }

  private get generation(): GenerationContext | undefined {
    return this.tokenizer && { tokenizer: this.tokenizer, generationConfig: this.generationConfig };
  }

  /** Releases the weights now rather than at garbage collection; open sessions keep them until they go. */
  dispose(): void {
    this.disposed = true;
    this.native.dispose();
  }

  /** @internal */
  disposed = false;
}

// Models already loaded in this process, by folder and options: a notebook that re-runs its load cell,
// or several scripts in one kernel, get the same weights instead of a second copy. Weak references,
// so the cache never keeps a model alive.
const loadedModels = new Map<string, WeakRef<Model>>();

const SMALL_CHECKPOINT_BYTES = 64 * 1024 * 1024;

// 0 lets the core use every core; small models run faster on one (see LoadOptions.threads).
function defaultThreads(dir: string): number {
  let bytes = 0;
  for (const f of fs.readdirSync(dir)) if (f.endsWith(".safetensors")) bytes += fs.statSync(path.join(dir, f)).size;
  return bytes < SMALL_CHECKPOINT_BYTES ? 1 : 0;
}

// Off macOS the Metal backend runs its kernels on the CPU emulator: a harness for the host code, far
// slower than the cpu backend, so it runs only when asked for (the CLI's --emulator says the same).
function checkEmulator(backend: BackendName, emulator: boolean): void {
  const onMac = process.platform === "darwin";
  if (backend === "metal" && !onMac && !emulator) {
    throw new Error(
      `backend "metal": Metal needs macOS; on ${process.platform}, backend: "emulator" runs the same kernels on the CPU ` +
        `emulator, a test harness far slower than backend: "cpu" (add emulator: true to run the Metal host over it anyway)`,
    );
  }
  if (emulator && backend !== "metal") throw new Error(`emulator: true goes with backend: "metal"; got backend: ${JSON.stringify(backend)}`);
  if (emulator && onMac) throw new Error(`emulator: true: on macOS backend "metal" runs on the GPU, not on the emulator`);
}

/**
 * Loads a checkpoint directory (HF or mlx-community layout); default: the embedded model. Loading the
 * same folder with the same backend, threads and precision again returns the model already loaded in this process
 * (unless it was disposed, or `fresh` is set).
 */
export async function load(dir: string = embeddedModelDir, options: LoadOptions = {}): Promise<Model> {
  const resolved = path.resolve(dir);
  if (!fs.existsSync(resolved) || !fs.statSync(resolved).isDirectory()) {
    throw new Error(`${resolved}: not a model directory`);
  }
  const backend = options.backend ?? "cpu";
  checkEmulator(backend, options.emulator ?? false);
  const threads = options.threads ?? defaultThreads(resolved);
  const precision = options.precision ?? "fp32";
  if (!precisions.includes(precision)) {
    throw new Error(`precision must be one of ${precisions.map((p) => JSON.stringify(p)).join(", ")}; got ${JSON.stringify(precision)}`);
  }
  const prefillChunk = options.prefillChunk ?? 0;
  if (options.prefillChunk !== undefined && (!Number.isInteger(prefillChunk) || prefillChunk < 1 || prefillChunk > 1 << 20)) {
    throw new Error(`prefillChunk must be a whole number of tokens from 1 to ${1 << 20}; got ${JSON.stringify(options.prefillChunk)}`);
  }
  const prefillMinTokens = options.prefillMinTokens ?? 0;
  if (options.prefillMinTokens !== undefined) {
    if (!Number.isInteger(prefillMinTokens) || prefillMinTokens < 1 || prefillMinTokens > 1 << 20)
      throw new Error(`prefillMinTokens must be a whole number of tokens from 1 to ${1 << 20}; got ${JSON.stringify(options.prefillMinTokens)}`);
    if (backend === "cpu") throw new Error(`prefillMinTokens is an option of the GPU backends; the cpu backend has no tiled kernels`);
  }
  const key = `${resolved}\0${backend}\0${threads}\0${precision}\0${prefillChunk}\0${prefillMinTokens}`;
  const cached = options.fresh ? undefined : loadedModels.get(key)?.deref();
  if (cached && !cached.disposed) return cached;
  const hasTokenizer = fs.existsSync(path.join(resolved, "tokenizer.json"));
  const [nativeModel, tokenizer] = await Promise.all([
    native().loadModel(resolved, { backend, threads, precision, prefillChunk, prefillMinTokens }, options.onProgress),
    hasTokenizer ? loadTokenizer(resolved) : undefined,
  ]);
  const model = new Model(nativeModel, resolved, tokenizer);
  loadedModels.set(key, new WeakRef(model));
  return model;
}
