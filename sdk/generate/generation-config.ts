// What a checkpoint says about generation: the ids that end it and the default sampling, from
// generation_config.json (as transformers' generate reads it).
import * as fs from "node:fs";
import * as path from "node:path";
import type { SamplerOptions } from "./sampler";

export interface GenerationConfig {
  /** Generation stops when one of these is sampled. */
  eosTokenIds: number[];
  /** Default sampling: the file's values when do_sample is true, else greedy (temperature 0). */
  sampling: SamplerOptions;
  /** The file it came from, or undefined when the folder has none. */
  source: string | undefined;
}

/**
 * Reads `dir/generation_config.json`. Without it (or without eos_token_id in it), the eos ids are
 * `fallbackEos`: config.json's eos_token_id plus the tokenizer's eos_token, so chat models whose
 * config names only <|endoftext|> still stop at the end of a turn.
 */
export function loadGenerationConfig(dir: string, fallbackEos: number[]): GenerationConfig {
  const file = path.join(dir, "generation_config.json");
  if (!fs.existsSync(file)) return { eosTokenIds: unique(fallbackEos), sampling: { temperature: 0 }, source: undefined };
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(fs.readFileSync(file, "utf8"));
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new Error("not a JSON object");
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message}`);
  }
  const eos = raw.eos_token_id;
  let eosTokenIds: number[];
  if (eos === undefined || eos === null) eosTokenIds = unique(fallbackEos);
  else if (Number.isInteger(eos)) eosTokenIds = [eos as number];
  else if (Array.isArray(eos) && eos.every(Number.isInteger)) eosTokenIds = unique(eos as number[]);
  else throw new Error(`${file}: eos_token_id must be an integer or a list of integers`);

  const sampling: SamplerOptions = { temperature: 0 };
  if (raw.do_sample === true) {
    const field = (name: string): number | undefined => {
      const v = raw[name];
      if (v === undefined || v === null) return undefined;
      if (typeof v !== "number") throw new Error(`${file}: ${name} must be a number`);
      return v;
    };
    sampling.temperature = field("temperature") ?? 1;
    sampling.topK = field("top_k");
    sampling.topP = field("top_p");
    sampling.minP = field("min_p");
    sampling.repetitionPenalty = field("repetition_penalty");
    for (const k of Object.keys(sampling) as (keyof SamplerOptions)[]) if (sampling[k] === undefined) delete sampling[k];
  }
  return { eosTokenIds, sampling, source: file };
}

function unique(ids: number[]): number[] {
  return [...new Set(ids)];
}
