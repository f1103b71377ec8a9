// Command-line flags: parsed with node:util parseArgs, then checked and converted.
import { parseArgs } from "node:util";
import { precisions, type BackendName, type Precision } from "../model";
import type { GenerateOptions } from "../generate/generate";
import { UsageError } from "./errors";

const FLAGS = {
  model: { type: "string" },
  backend: { type: "string" },
  threads: { type: "string" },
  precision: { type: "string" },
  "max-tokens": { type: "string" },
  temperature: { type: "string" },
  "top-k": { type: "string" },
  "top-p": { type: "string" },
  "min-p": { type: "string" },
  "repetition-penalty": { type: "string" },
  "presence-penalty": { type: "string" },
  seed: { type: "string" },
  stop: { type: "string", multiple: true },
  system: { type: "string" },
  think: { type: "boolean" },
  "no-think": { type: "boolean" },
  chat: { type: "boolean" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

export interface CliOptions {
  positionals: string[];
  model?: string;
  backend?: BackendName;
  threads?: number;
  precision?: Precision;
  generation: GenerateOptions;
  system?: string;
  chat: boolean;
  json: boolean;
  help: boolean;
}

export function parseOptions(args: string[]): CliOptions {
  let parsed;
  try {
    parsed = parseArgs({ args, options: FLAGS, allowPositionals: true, strict: true });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const v = parsed.values;
  if (v.think && v["no-think"]) throw new UsageError("--think and --no-think exclude each other");
  const generation: GenerateOptions = {
    maxTokens: number("--max-tokens", v["max-tokens"], { integer: true, min: 0 }),
    temperature: number("--temperature", v.temperature, { min: 0 }),
    topK: number("--top-k", v["top-k"], { integer: true, min: 0 }),
    topP: number("--top-p", v["top-p"], { min: 0 }),
    minP: number("--min-p", v["min-p"], { min: 0 }),
    repetitionPenalty: number("--repetition-penalty", v["repetition-penalty"], {}),
    presencePenalty: number("--presence-penalty", v["presence-penalty"], {}),
    seed: number("--seed", v.seed, { integer: true }),
    stop: v.stop,
    enableThinking: v.think ? true : v["no-think"] ? false : undefined,
  };
  for (const k of Object.keys(generation) as (keyof GenerateOptions)[]) if (generation[k] === undefined) delete generation[k];
  return {
    positionals: parsed.positionals,
    model: v.model,
    backend: v.backend as BackendName | undefined,
    threads: number("--threads", v.threads, { integer: true, min: 1 }),
    precision: precision(v.precision),
    generation,
    system: v.system,
    chat: v.chat ?? false,
    json: v.json ?? false,
    help: v.help ?? false,
  };
}

export function precision(text: string | undefined): Precision | undefined {
  if (text === undefined || (precisions as readonly string[]).includes(text)) return text as Precision | undefined;
  throw new UsageError(`--precision must be ${precisions.join(", ")}; got '${text}'`);
}

function number(flag: string, text: string | undefined, rule: { integer?: boolean; min?: number }): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || (rule.integer && !Number.isInteger(value))) {
    throw new UsageError(`${flag} needs ${rule.integer ? "an integer" : "a number"}, got '${text}'`);
  }
  if (rule.min !== undefined && value < rule.min) throw new UsageError(`${flag} must be >= ${rule.min}, got ${value}`);
  return value;
}
