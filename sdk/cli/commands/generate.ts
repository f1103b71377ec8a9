// `moelens generate [prompt]`: streams a continuation to stdout, the speed to stderr.
import type { ChatMessage } from "../../chat/message";
import type { GenerateChunk } from "../../generate/generate";
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

  const abort = new AbortController();
  const onSigint = () => abort.abort();
  process.once("SIGINT", onSigint);
  let last: GenerateChunk | undefined;
  let text = "";
  try {
    for await (const chunk of model.session().generate(input, { ...options.generation, signal: abort.signal })) {
      process.stdout.write(chunk.text);
      text += chunk.text;
      last = chunk;
    }
  } finally {
    process.off("SIGINT", onSigint);
  }
  if (process.stdout.isTTY && !text.endsWith("\n")) process.stdout.write("\n");
  if (last?.timings) process.stderr.write(speedLine(last.timings, last.finishReason) + "\n");
  return last?.finishReason === "abort" ? 130 : 0;
}

async function readStdin(): Promise<string> {
  const parts: Buffer[] = [];
  for await (const part of process.stdin) parts.push(part as Buffer);
  return Buffer.concat(parts).toString("utf8");
}
