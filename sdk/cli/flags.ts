// Reading command-line flags, for every command, with one message style: "--flag VALUE: what is
// wrong" (a UsageError, exit status 2). Negative numbers are values, not flags: `--seed -1`.
import { parseArgs, type ParseArgsConfig } from "node:util";
import { UsageError } from "./errors";

type Flags = NonNullable<ParseArgsConfig["options"]>;

/** `args` parsed against `flags` (node:util parseArgs, strict), with its errors reworded. */
export function parseFlags<T extends Flags>(
  args: string[],
  flags: T,
  allowPositionals: boolean,
): ReturnType<typeof parseArgs<{ options: T; allowPositionals: boolean; strict: true }>> {
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const name = args[i].startsWith("--") ? args[i].slice(2) : undefined;
    // parseArgs takes "-1" after a flag for another flag; join it as --flag=-1.
    if (name !== undefined && flags[name]?.type === "string" && /^-(\d|\.\d|Infinity)/.test(args[i + 1] ?? "")) {
      joined.push(`${args[i]}=${args[++i]}`);
    } else {
      joined.push(args[i]);
    }
  }
  try {
    return parseArgs({ args: joined, options: flags, allowPositionals, strict: true });
  } catch (e) {
    throw new UsageError(reworded(e as Error & { code?: string }));
  }
}

function reworded(e: Error & { code?: string }): string {
  const flag = /'(-[^' ]+)/.exec(e.message)?.[1];
  if (e.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && flag) return `${flag}: unknown option`;
  if (e.code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && flag) {
    return e.message.includes("does not take an argument") ? `${flag}: takes no value` : `${flag}: needs a value`;
  }
  if (e.code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL") return `unexpected argument ${/'([^']*)'/.exec(e.message)?.[1] ?? ""}`.trim();
  return e.message;
}

export interface NumberRule {
  /** Whether `value` is acceptable. */
  ok: (value: number) => boolean;
  /** What is acceptable, for the message: "an integer >= 0". */
  what: string;
}

export const integerAtLeast = (min: number): NumberRule => ({ ok: (v) => Number.isInteger(v) && v >= min, what: `an integer >= ${min}` });
export const integerIn = (min: number, max: number): NumberRule => ({
  ok: (v) => Number.isInteger(v) && v >= min && v <= max,
  what: `an integer in [${min}, ${max}]`,
});
export const positiveNumber: NumberRule = { ok: (v) => v > 0, what: "a number > 0" };

/** The number a flag gives, checked against `rule`; undefined when the flag is absent. */
export function numberFlag(flag: string, text: string | undefined, rule: NumberRule): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || !rule.ok(value)) throw new UsageError(`${flag} ${text}: must be ${rule.what}`);
  return value;
}

/** The flag's value, which must be one of `choices`. */
export function choiceFlag<C extends string>(flag: string, text: string | undefined, choices: readonly C[]): C | undefined {
  if (text === undefined || (choices as readonly string[]).includes(text)) return text as C | undefined;
  throw new UsageError(`${flag} ${text}: must be one of ${choices.join(", ")}`);
}

/** "topP" -> "--top-p": the flag for an option of the SDK. */
export function flagName(option: string): string {
  return "--" + option.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase());
}
