// POST /v1/chat/completions and /v1/completions: validate, tokenize, queue, generate, answer as one
// JSON response or as SSE chunks. A client that goes away aborts its generation (or leaves the queue).
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { GenerateOptions } from "../generate/generate";
import type { Model } from "../model";
import { ApiError, modelNotFound } from "./api-error";
import type { Engine, GenerationOutcome } from "./engine";
import type { PromptWorkers } from "./prompt-workers";
import { completeResponse, streamChunk, usage, type Endpoint, type ResponseHead } from "./openai-shapes";
import { readJsonBody } from "./request-body";
import { conversationBoundaries, promptIds, tokenBudget } from "./request-prompt";
import { SseStream } from "./sse";
import { parseChatRequest, parseCompletionRequest, type SamplingRequest } from "./validate";

export interface CompletionContext {
  model: Model;
  /** The id clients pass as `model`. */
  modelId: string;
  engine: Engine;
  /** Render and tokenize prompts off the event loop; undefined when the model has no tokenizer. */
  prompts: PromptWorkers | undefined;
  maxRequestBytes: number;
}

/** Answers the request; resolves to the generation's outcome (for the log), if one ran to the end. */
export async function handleCompletion(
  endpoint: Endpoint,
  ctx: CompletionContext,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<GenerationOutcome | undefined> {
  const body = await readJsonBody(req, ctx.maxRequestBytes);
  const request = endpoint === "chat" ? parseChatRequest(body) : parseCompletionRequest(body);
  if (request.model !== ctx.modelId) {
    throw modelNotFound(request.model, ctx.modelId);
  }
  const prompts = ctx.prompts;
  if (!prompts) throw new ApiError(400, `${ctx.model.dir} has no tokenizer.json, so no text endpoints`, "invalid_request_error", "no_tokenizer");
  const promptTokens = await promptIds(ctx.model, prompts, request);
  const maxTokens = tokenBudget(promptTokens.length, request.sampling.maxTokens, ctx.model.config.maxPositionEmbeddings, endpoint === "chat" ? "messages" : "prompt");
  const prompt = Array.from(promptTokens);
  const checkpoints = request.kind === "chat" && ctx.engine.cache.enabled ? await conversationBoundaries(prompts, request, prompt) : undefined;

  const abort = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) abort.abort(new Error("the client closed the connection"));
  };
  res.on("close", onClose);
  const place = ctx.engine.reserve(abort.signal);
  try {
    const head: ResponseHead = {
      id: `${endpoint === "chat" ? "chatcmpl" : "cmpl"}-${randomUUID().replaceAll("-", "")}`,
      created: Math.floor(Date.now() / 1000),
      model: ctx.modelId,
    };
    const job = {
      prompt,
      checkpoints,
      options: generateOptions(request.sampling, maxTokens),
      routing: request.routing,
      signal: abort.signal,
    };
    const includeUsage = request.stream && request.includeUsage;
    // A stream starts now, so a client waiting in the queue already holds an open response.
    const sse = request.stream ? new SseStream(res) : undefined;
    if (sse && endpoint === "chat") sse.send(streamChunk(endpoint, head, { role: true, text: "", includeUsage }));
    let text = "";
    const onText = sse ? (piece: string) => sse.send(streamChunk(endpoint, head, { text: piece, includeUsage })) : (piece: string) => (text += piece);
    let outcome: GenerationOutcome;
    try {
      outcome = await ctx.engine.run(place, job, onText);
    } catch (e) {
      if (abort.signal.aborted) return undefined; // the client left while waiting: nobody to tell
      sse?.fail(ApiError.from(e).body);
      throw e;
    }
    if (abort.signal.aborted) return outcome; // the client left during generation (finish "abort")
    if (!sse) {
      sendJson(res, 200, completeResponse(endpoint, head, text, outcome));
      return outcome;
    }
    sse.send(streamChunk(endpoint, head, { text: endpoint === "chat" ? undefined : "", finish: outcome, includeUsage }));
    if (includeUsage) sse.send(streamChunk(endpoint, head, { usage: usage(outcome), includeUsage }));
    sse.done();
    return outcome;
  } finally {
    place.release();
    res.off("close", onClose);
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

function generateOptions(s: SamplingRequest, maxTokens: number): GenerateOptions {
  const options: GenerateOptions = {
    maxTokens,
    temperature: s.temperature,
    topP: s.topP,
    topK: s.topK,
    minP: s.minP,
    seed: s.seed,
    presencePenalty: s.presencePenalty,
    frequencyPenalty: s.frequencyPenalty,
    stop: s.stop,
    // vLLM's default: the text holds no special tokens (an eos id never shows anyway).
    skipSpecialTokens: true,
  };
  if (s.ignoreEos) options.stopTokenIds = [];
  for (const k of Object.keys(options) as (keyof GenerateOptions)[]) if (options[k] === undefined) delete options[k];
  return options;
}
