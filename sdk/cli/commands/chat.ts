// `moelens chat`: a multi-turn REPL. Each turn feeds only what it adds to the session (see
// Conversation). Ctrl+C stops a reply; at the prompt it leaves, like Ctrl+D and /exit.
import * as readline from "node:readline";
import type { Conversation } from "../../chat/conversation";
import type { Model } from "../../model";
import { UsageError } from "../errors";
import { loadModel } from "../load-model";
import type { CliOptions } from "../options";
import { speedLine } from "../speed";

export async function chatCommand(options: CliOptions): Promise<number> {
  if (options.positionals.length > 0) throw new UsageError("chat takes no arguments; type the messages at its prompt");
  const model = await loadModel(options);
  if (!model.tokenizer?.chatTemplate) throw new UsageError(`${model.dir} has no chat template; use generate`);
  const interactive = process.stdin.isTTY === true;
  const start = (m: Model) =>
    m.conversation({ system: options.system, enableThinking: options.generation.enableThinking });
  let conversation: Conversation = start(model);
  let abort: AbortController | undefined;

  const rl = readline.createInterface({ input: process.stdin, output: interactive ? process.stdout : undefined, terminal: interactive });
  rl.on("SIGINT", () => (abort ? abort.abort() : rl.close()));
  if (interactive) process.stderr.write(`chatting with ${model.dir} (/reset starts over, /exit leaves)\n`);
  const ask = () => interactive && process.stdout.write("> ");
  ask();
  for await (const line of rl) {
    const text = line.trim();
    if (text === "/exit") break;
    if (text === "/reset") {
      conversation = start(model);
      process.stderr.write("(new conversation)\n");
    } else if (text !== "") {
      abort = new AbortController();
      let reply = "";
      let finish;
      for await (const chunk of conversation.send(text, { ...options.generation, signal: abort.signal })) {
        process.stdout.write(chunk.text);
        reply += chunk.text;
        if (chunk.timings) {
          if (!reply.endsWith("\n")) process.stdout.write("\n");
          finish = speedLine(chunk.timings, chunk.finishReason);
        }
      }
      abort = undefined;
      process.stderr.write(`[${finish}; fed ${conversation.promptTokensFed} new prompt tokens]\n`);
    }
    ask();
  }
  rl.close();
  return 0;
}
