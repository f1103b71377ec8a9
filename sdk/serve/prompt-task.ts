// What the server and its prompt worker processes say to each other (prompt-workers.ts, prompt-worker.ts).
import type { ChatMessage } from "../chat/message";
import type { ChatRenderOptions } from "../chat/template";

/** The environment variable that names the checkpoint folder (tokenizer.json, chat template) of a worker. */
export const PROMPT_WORKER_DIR = "MOELENS_PROMPT_WORKER_DIR";

export type PromptTask =
  | { op: "encode"; text: string }
  | { op: "chat"; messages: ChatMessage[]; options: ChatRenderOptions };

export type PromptReply =
  | { ids: Uint32Array }
  /** `template`: the chat template refused the conversation; `internal`: anything else. */
  | { error: string; kind: "template" | "internal" };
