// `moelens generate [prompt]`: streams a continuation to stdout, the speed to stderr.
import * as fs from "node:fs";
import type { ChatMessage } from "../../chat/message";
import { contextRoom, promptTokens, type GenerateChunk } from "../../generate/generate";
import { UsageError } from "../errors";
import { loadModel } from "../load-model";
import type { CliOptions } from "../options";
import { speedLine } from "../speed";

export async function generateCommand(options: CliOptions): Promise<number> {
  let prompt = options.positionals.join(" ");
  if (prompt === "" && !process.stdin.isTTY) prompt = await readStdin();
  if (prompt === "") throw new UsageError("generate needs a prompt (an argument, or text on stdin)");
  if (options.system !== undefined && !options.chat) throw new UsageError("--system needs --chat with generate");
  const model = await loadModel(options);
  const input: string | ChatMessage[] = options.chat
    ? [...(options.system !== undefined ? [{ role: "system" as const, content: options.system }] : []), { role: "user", content: prompt }]
    : prompt;

  const tokenizer = model.tokenizer;
  if (!tokenizer) throw new Error(`${model.dir} has no tokenizer.json, so generate cannot read text`);
  const session = model.session();
  const ids = promptTokens({ tokenizer, generationConfig: model.generationConfig }, input, options.generation);
  const room = contextRoom(session, ids.length);
  const asked = options.generation.maxTokens;
  if (room < 0 || (asked !== undefined && asked > room)) {
    const context = `the model's context holds ${model.config.maxPositionEmbeddings} tokens and the prompt takes ${ids.length}`;
    throw new UsageError(room < 0 ? `the prompt is too long: ${context}` : `--max-tokens ${asked}: ${context}, so at most ${room}`);
  }

  const abort = new AbortController();
  const onSigint = () => abort.abort();
  process.once("SIGINT", onSigint);
  let last: GenerateChunk | undefined;
  let text = "";
  try {
    for await (const chunk of session.generate(ids, { ...options.generation, signal: abort.signal })) {
      process.stdout.write(chunk.text);
      text += chunk.text;
      last = chunk;
    }
  } finally {
    process.off("SIGINT", onSigint);
  }
  // The speed goes on a line of its own where the two streams meet (a terminal, or `2>&1`).
  if ((process.stdout.isTTY || sameFile(1, 2)) && text !== "" && !text.endsWith("\n")) process.stdout.write("\n");
  if (last?.timings) process.stderr.write(speedLine(last.timings, last.finishReason) + "\n");
  return last?.finishReason === "abort" ? 130 : 0;
}

async function readStdin(): Promise<string> {
  const parts: Buffer[] = [];
  for await (const part of process.stdin) parts.push(part as Buffer);
  return Buffer.concat(parts).toString("utf8");
}

function sameFile(a: number, b: number): boolean {
  try {
    const [x, y] = [fs.fstatSync(a), fs.fstatSync(b)];
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false;
  }
}
