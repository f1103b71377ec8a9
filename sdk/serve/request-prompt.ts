// A request's prompt as token ids (chat messages through the checkpoint's chat template), the places
// in a chat prompt worth keeping a session at for later requests, and the token limit it leaves: a
// prompt or prompt + max_tokens past the context is a 400, as OpenAI's context_length_exceeded.
import type { Model } from "../model";
import type { Tokenizer } from "../tokenizer/tokenizer";
import { ApiError, invalidParam } from "./api-error";
import type { ChatRequest, CompletionRequest } from "./validate";

export function promptIds(model: Model, tokenizer: Tokenizer, request: ChatRequest | CompletionRequest): number[] {
  if (request.kind === "completion") {
    const prompt = request.prompt;
    if (typeof prompt === "string") return tokenizer.encode(prompt);
    const vocab = model.config.vocabSize;
    const bad = prompt.findIndex((id) => id >= vocab);
    if (bad >= 0) throw invalidParam("prompt", `prompt[${bad}] = ${prompt[bad]} is not a token id of this model (vocabulary ${vocab})`);
    return prompt;
  }
  const template = tokenizer.chatTemplate;
  if (!template) {
    throw new ApiError(400, `${model.dir} has no chat template; use /v1/completions`, "invalid_request_error", "no_chat_template");
  }
  let text: string;
  try {
    text = render(tokenizer, request, request.messages, true);
  } catch (e) {
    // Templates raise on conversations they do not accept (roles out of order, a missing user turn...).
    throw invalidParam("messages", (e as Error).message, "invalid_messages");
  }
  const ids = tokenizer.encode(text);
  if (ids.length === 0) throw invalidParam("messages", "the rendered prompt is empty");
  return ids;
}

/**
 * Token counts at which a chat prompt's state is worth keeping: the conversation without the
 * generation prompt (the next turn of the conversation starts with it) and without its last message
 * (other questions after the same system prompt or few-shot examples start with it). Only places
 * where that rendering is a token prefix of `prompt` count; templates that refuse the shorter
 * conversation (Qwen's need a user message) give none.
 */
export function conversationBoundaries(tokenizer: Tokenizer, request: ChatRequest, prompt: readonly number[]): number[] {
  const out = new Set<number>();
  for (const messages of [request.messages, request.messages.slice(0, -1)]) {
    if (messages.length === 0) continue;
    let ids: number[];
    try {
      ids = tokenizer.encode(render(tokenizer, request, messages, false));
    } catch {
      continue;
    }
    if (ids.length > 0 && ids.length < prompt.length && ids.every((id, i) => id === prompt[i])) out.add(ids.length);
  }
  return [...out].sort((a, b) => a - b);
}

function render(tokenizer: Tokenizer, request: ChatRequest, messages: ChatRequest["messages"], addGenerationPrompt: boolean): string {
  return tokenizer.chatTemplate!.render(messages, {
    addGenerationPrompt,
    enableThinking: request.enableThinking,
    tools: request.tools,
    variables: request.templateVariables,
  });
}

/** The tokens the request may generate: max_tokens, or by default what the context leaves. */
export function tokenBudget(promptTokens: number, maxTokens: number | undefined, context: number, param: string): number {
  const exceeded = (message: string) => new ApiError(400, message, "invalid_request_error", "context_length_exceeded", param);
  if (promptTokens >= context) {
    throw exceeded(`the prompt has ${promptTokens} tokens; this model's context is ${context} tokens, which leaves no room to generate`);
  }
  if (maxTokens === undefined) return context - promptTokens;
  if (promptTokens + maxTokens > context) {
    throw exceeded(`the prompt (${promptTokens} tokens) plus max_tokens (${maxTokens}) exceed this model's context of ${context} tokens`);
  }
  return maxTokens;
}
