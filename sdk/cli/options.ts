// The flags of generate, chat and info: parsed, then checked and converted up front, before the model
// loads. Each generation flag is the SDK option's name in kebab case (topP: --top-p) and accepts
// what the SDK accepts.
import { precisions, type BackendName, type Precision } from "../model";
import type { GenerateOptions } from "../generate/generate";
import { SAMPLING_RULES, type SamplerOptions } from "../generate/sampler";
import { UsageError } from "./errors";
import { choiceFlag, flagName, integerAtLeast, numberFlag, parseFlags } from "./flags";

const FLAGS = {
  model: { type: "string" },
  backend: { type: "string" },
  emulator: { type: "boolean" },
  threads: { type: "string" },
  precision: { type: "string" },
  "max-tokens": { type: "string" },
  temperature: { type: "string" },
  "top-k": { type: "string" },
  "top-p": { type: "string" },
  "min-p": { type: "string" },
  "repetition-penalty": { type: "string" },
  "presence-penalty": { type: "string" },
  "frequency-penalty": { type: "string" },
  seed: { type: "string" },
  stop: { type: "string", multiple: true },
  "skip-special-tokens": { type: "boolean" },
  system: { type: "string" },
  think: { type: "boolean" },
  "no-think": { type: "boolean" },
  chat: { type: "boolean" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

/** What loading the model needs (every command that loads one has these flags). */
export interface ModelFlags {
  model?: string;
  backend?: BackendName;
  /** --emulator: allow the Metal backend off macOS, where it runs on the CPU emulator of the kernels. */
  emulator: boolean;
  threads?: number;
  precision?: Precision;
}

export interface CliOptions extends ModelFlags {
  positionals: string[];
  generation: GenerateOptions;
  system?: string;
  chat: boolean;
  json: boolean;
  help: boolean;
}

export function parseOptions(args: string[]): CliOptions {
  const { values: v, positionals } = parseFlags(args, FLAGS, true);
  if (v.think && v["no-think"]) throw new UsageError("--think and --no-think exclude each other");
  const generation: GenerateOptions = {
    maxTokens: numberFlag("--max-tokens", v["max-tokens"], integerAtLeast(0)),
    stop: v.stop,
    skipSpecialTokens: v["skip-special-tokens"],
    enableThinking: v.think ? true : v["no-think"] ? false : undefined,
  };
  for (const [option, rule] of Object.entries(SAMPLING_RULES) as [keyof SamplerOptions, (typeof SAMPLING_RULES)[keyof SamplerOptions]][]) {
    const flag = flagName(option);
    generation[option] = numberFlag(flag, v[flag.slice(2) as keyof typeof v] as string | undefined, rule);
  }
  for (const k of Object.keys(generation) as (keyof GenerateOptions)[]) if (generation[k] === undefined) delete generation[k];
  return {
    positionals,
    ...modelFlags(v),
    generation,
    system: v.system,
    chat: v.chat ?? false,
    json: v.json ?? false,
    help: v.help ?? false,
  };
}

/** The model flags among parsed values (shared with serve). */
export function modelFlags(v: { model?: string; backend?: string; emulator?: boolean; threads?: string; precision?: string }): ModelFlags {
  if (v.emulator && v.backend !== "metal") throw new UsageError("--emulator: goes with --backend metal");
  return {
    model: v.model,
    backend: v.backend as BackendName | undefined,
    emulator: v.emulator ?? false,
    threads: numberFlag("--threads", v.threads, integerAtLeast(1)),
    precision: choiceFlag("--precision", v.precision, precisions),
  };
}
