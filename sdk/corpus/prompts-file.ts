// The corpus: a JSONL file, one prompt per line: {"text": "..."} or {"ids": [1, 2, 3]}, with an
// optional "id" (a string or a number) that names the prompt in the shards. Blank lines are skipped.
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as readline from "node:readline";

export interface PromptRecord {
  /** 0-based index of the prompt among the file's prompts. */
  index: number;
  /** The record's "id", else its index, as text. */
  id: string;
  /** 1-based line number in the file (for errors). */
  line: number;
  text?: string;
  ids?: number[];
}

export interface PromptsSummary {
  count: number;
  /** sha256 of the file's bytes: a resumed trace must read the same file. */
  sha256: string;
}

async function* lines(file: string, hash?: ReturnType<typeof createHash>): AsyncGenerator<{ text: string; line: number }> {
  const stream = fs.createReadStream(file);
  if (hash) stream.on("data", (chunk) => hash.update(chunk));
  const rl = readline.createInterface({ input: stream, crlfDelay: Infinity });
  let line = 0;
  for await (const text of rl) yield { text, line: ++line };
}

function parseRecord(file: string, text: string, line: number, index: number): PromptRecord {
  const where = `${file}:${line}`;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`${where}: not JSON (${(e as Error).message})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error(`${where}: expected an object such as {"text": "..."}`);
  const v = value as Record<string, unknown>;
  if (("text" in v) === ("ids" in v)) throw new Error(`${where}: give exactly one of "text" (a string) and "ids" (token ids)`);
  const record: PromptRecord = { index, id: String(index), line };
  if ("id" in v) {
    if (typeof v.id !== "string" && !(typeof v.id === "number" && Number.isFinite(v.id))) throw new Error(`${where}: "id" must be a string or a number`);
    record.id = String(v.id);
  }
  if ("text" in v) {
    if (typeof v.text !== "string" || v.text === "") throw new Error(`${where}: "text" must be a non-empty string`);
    record.text = v.text;
  } else {
    if (!Array.isArray(v.ids) || v.ids.length === 0 || !v.ids.every((x) => Number.isInteger(x) && x >= 0)) {
      throw new Error(`${where}: "ids" must be a non-empty array of token ids (integers >= 0)`);
    }
    record.ids = v.ids as number[];
  }
  return record;
}

/**
 * Reads the whole file once: every record valid (and accepted by `check`, whose error message gets
 * the file and line), ids unique; the count and the file's hash.
 */
export async function checkPromptsFile(file: string, check?: (record: PromptRecord) => void): Promise<PromptsSummary> {
  let stat;
  try {
    stat = fs.statSync(file);
  } catch {
    throw new Error(`${file}: no such prompts file`);
  }
  if (!stat.isFile()) throw new Error(`${file}: not a file`);
  const hash = createHash("sha256");
  const seen = new Map<string, number>();
  let count = 0;
  for await (const { text, line } of lines(file, hash)) {
    if (text.trim() === "") continue;
    const record = parseRecord(file, text, line, count++);
    try {
      check?.(record);
    } catch (e) {
      throw new Error(`${file}:${line}: ${(e as Error).message}`);
    }
    const earlier = seen.get(record.id);
    if (earlier !== undefined) throw new Error(`${file}:${line}: prompt id "${record.id}" is also on line ${earlier}`);
    seen.set(record.id, line);
  }
  if (count === 0) throw new Error(`${file}: no prompts (one JSON object per line: {"text": "..."})`);
  return { count, sha256: hash.digest("hex") };
}

/** The file's records in order, from the prompt with index `from` on. */
export async function* readPrompts(file: string, from = 0): AsyncGenerator<PromptRecord> {
  let index = 0;
  for await (const { text, line } of lines(file)) {
    if (text.trim() === "") continue;
    if (index >= from) yield parseRecord(file, text, line, index);
    index++;
  }
}
