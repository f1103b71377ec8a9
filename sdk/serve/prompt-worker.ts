// The body of a prompt worker process (started by prompt-workers.ts): renders chat templates and
// tokenizes prompts with its own copy of the checkpoint's tokenizer, so that a long prompt never
// blocks the server's event loop. Replies carry token ids only.
import * as fs from "node:fs";
import * as path from "node:path";
import { Tokenizer as HfTokenizer } from "tokenizers";
import { loadChatTemplate } from "../chat/template";
import { readTokenizerConfig } from "../tokenizer/tokenizer";
import { PROMPT_WORKER_DIR, type PromptReply, type PromptTask } from "./prompt-task";

const dir = process.env[PROMPT_WORKER_DIR] ?? "";
const tokenizer = HfTokenizer.fromString(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const template = loadChatTemplate(dir, readTokenizerConfig(dir));

async function encode(text: string): Promise<Uint32Array> {
  const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
  return Uint32Array.from(encoding.getIds());
}

async function run(task: PromptTask): Promise<PromptReply> {
  if (task.op === "encode") return { ids: await encode(task.text) };
  if (!template) return { error: `${dir} has no chat template`, kind: "internal" };
  let text: string;
  try {
    text = template.render(task.messages, task.options);
  } catch (e) {
    return { error: (e as Error).message, kind: "template" };
  }
  return { ids: await encode(text) };
}

process.on("message", (task: PromptTask) => {
  run(task)
    .catch((e: unknown): PromptReply => ({ error: e instanceof Error ? e.message : String(e), kind: "internal" }))
    .then((reply) => process.send!(reply));
});
// The server went away: nothing is left to answer.
process.on("disconnect", () => process.exit(0));
process.send!({ ready: true });
