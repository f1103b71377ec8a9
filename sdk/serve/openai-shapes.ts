// The JSON the two endpoints answer with, as OpenAI's API shapes it: whole responses
// ("chat.completion", "text_completion") and stream chunks ("chat.completion.chunk", "text_completion").
import type { FinishReason } from "../generate/generate";
import type { GenerationOutcome } from "./engine";
import type { RoutingSummary } from "./routing-summary";

export type Endpoint = "chat" | "completion";

/** OpenAI's finish reasons: an eos id and a stop string are both "stop". */
export type OpenAiFinishReason = "stop" | "length";

export function openAiFinishReason(reason: FinishReason): OpenAiFinishReason {
  return reason === "length" ? "length" : "stop";
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usage(g: GenerationOutcome): Usage {
  return {
    prompt_tokens: g.promptTokens,
    completion_tokens: g.completionTokens,
    total_tokens: g.promptTokens + g.completionTokens,
    prompt_tokens_details: { cached_tokens: g.cachedTokens },
  };
}

/** What every response and chunk of one request shares. */
export interface ResponseHead {
  id: string;
  created: number;
  model: string;
}

/** The moelens extension block of a response or final chunk. */
function extension(routing: RoutingSummary | undefined): { moelens?: { routing: RoutingSummary } } {
  return routing ? { moelens: { routing } } : {};
}

export function completeResponse(endpoint: Endpoint, head: ResponseHead, text: string, g: GenerationOutcome) {
  const finish_reason = openAiFinishReason(g.finishReason);
  const choice =
    endpoint === "chat"
      ? { index: 0, message: { role: "assistant", content: text, refusal: null }, logprobs: null, finish_reason }
      : { index: 0, text, logprobs: null, finish_reason };
  return {
    ...head,
    object: endpoint === "chat" ? "chat.completion" : "text_completion",
    choices: [choice],
    usage: usage(g),
    system_fingerprint: null,
    ...extension(g.routing),
  };
}

/**
 * A stream chunk: `text` as the choice's delta (chat: `{role}` in the first chunk), `finish` on the
 * last choice chunk, or `usage` alone with no choices (stream_options.include_usage). With
 * include_usage, the other chunks carry `usage: null`, as OpenAI's do.
 */
export function streamChunk(
  endpoint: Endpoint,
  head: ResponseHead,
  part: { text?: string; role?: boolean; finish?: GenerationOutcome; usage?: Usage; includeUsage: boolean },
) {
  const finish_reason = part.finish ? openAiFinishReason(part.finish.finishReason) : null;
  let choices: object[];
  if (part.usage) choices = [];
  else if (endpoint === "chat") {
    const delta: Record<string, string> = {};
    if (part.role) delta.role = "assistant";
    if (part.text !== undefined) delta.content = part.text;
    choices = [{ index: 0, delta, logprobs: null, finish_reason }];
  } else {
    choices = [{ index: 0, text: part.text ?? "", logprobs: null, finish_reason }];
  }
  return {
    ...head,
    object: endpoint === "chat" ? "chat.completion.chunk" : "text_completion",
    choices,
    system_fingerprint: null,
    ...(part.includeUsage ? { usage: part.usage ?? null } : {}),
    ...extension(part.finish?.routing),
  };
}
