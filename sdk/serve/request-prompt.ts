// A request's prompt as token ids (chat messages through the checkpoint's chat template), the places
// in a chat prompt worth keeping a session at for later requests, and the token limit it leaves: a
// prompt or prompt + max_tokens past the context is a 400, as OpenAI's context_length_exceeded.
import type { Model } from "../model";
import { ApiError, invalidParam } from "./api-error";
import { TemplateError, type PromptWorkers } from "./prompt-workers";
import type { ChatRequest, CompletionRequest } from "./validate";

/** The prompt's token ids, rendered and tokenized on the prompt workers (off the event loop). */
export async function promptIds(model: Model, workers: PromptWorkers, request: ChatRequest | CompletionRequest): Promise<Uint32Array> {
  if (request.kind === "completion") {
    const prompt = request.prompt;
    if (typeof prompt === "string") return workers.encode(prompt);
    const vocab = model.config.vocabSize;
    const bad = prompt.findIndex((id) => id >= vocab);
    if (bad >= 0) throw invalidParam("prompt", `prompt[${bad}] = ${prompt[bad]} is not a token id of this model (vocabulary ${vocab})`);
    return Uint32Array.from(prompt);
  }
  if (!model.tokenizer?.chatTemplate) {
    throw new ApiError(400, `${model.dir} has no chat template; use /v1/completions`, "invalid_request_error", "no_chat_template");
  }
  let ids: Uint32Array;
  try {
    ids = await render(workers, request, request.messages, true);
  } catch (e) {
    // Templates raise on conversations they do not accept (roles out of order, a missing user turn...).
    if (e instanceof TemplateError) throw invalidParam("messages", e.message, "invalid_messages");
    throw e;
  }
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
export async function conversationBoundaries(workers: PromptWorkers, request: ChatRequest, prompt: readonly number[]): Promise<number[]> {
  const out = new Set<number>();
  for (const messages of [request.messages, request.messages.slice(0, -1)]) {
    if (messages.length === 0) continue;
    let ids: Uint32Array;
    try {
      ids = await render(workers, request, messages, false);
    } catch (e) {
      if (e instanceof TemplateError) continue;
      throw e;
    }
    if (ids.length > 0 && ids.length < prompt.length && ids.every((id, i) => id === prompt[i])) out.add(ids.length);
  }
  return [...out].sort((a, b) => a - b);
}

function render(workers: PromptWorkers, request: ChatRequest, messages: ChatRequest["messages"], addGenerationPrompt: boolean): Promise<Uint32Array> {
  return workers.chat(messages, {
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
