// Chat messages, as transformers' apply_chat_template and OpenAI-style APIs take them.

export type ChatRole = "system" | "user" | "assistant" | "tool";

export interface ChatToolCall {
  type?: "function";
  id?: string;
  function: { name: string; arguments: string | Record<string, unknown> };
}

export interface ChatMessage {
  role: ChatRole;
  content: string;
  /** An assistant turn's reasoning, for templates that render it apart from `content`. */
  reasoning_content?: string;
  tool_calls?: ChatToolCall[];
  /** Other fields are handed to the template as they are. */
  [field: string]: unknown;
}

/** True when `value` looks like a list of chat messages (each with a string role). */
export function isChatMessages(value: unknown): value is ChatMessage[] {
  return (
    Array.isArray(value) &&
    value.every((m) => typeof m === "object" && m !== null && typeof (m as { role?: unknown }).role === "string")
  );
}
