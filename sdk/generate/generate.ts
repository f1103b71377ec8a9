// Streaming generation on a session: prefill the prompt, then sample, decode and yield text token by
// token until an eos id, a stop string, the token limit or an abort.
//
// Afterwards the session holds the prompt and every generated token except a final eos id, so a
// later generate() or prefill() continues the same text.
import { isChatMessages, type ChatMessage } from "../chat/message";
import type { CaptureName, ForwardSession } from "../forward";
import type { Tokenizer } from "../tokenizer/tokenizer";
import type { RouterTrace } from "../trace/router";
import type { GenerationConfig } from "./generation-config";
import { Sampler, type SamplerOptions } from "./sampler";
import { StopStrings } from "./stop-strings";

/** What generation needs besides the session: the model's tokenizer and generation config. */
export interface GenerationContext {
  tokenizer: Tokenizer;
  generationConfig: GenerationConfig;
}

/** A raw prompt (no template), chat messages (rendered with the chat template), or token ids. */
export type GenerateInput = string | ChatMessage[] | readonly number[];

export interface GenerateOptions extends SamplerOptions {
  /** Most tokens to generate (default 256); fewer when the model's context fills up first (finish reason "length"). */
  maxTokens?: number;
  /** Stop before the first occurrence of any of these strings (they are not part of the output). */
  stop?: string | string[];
  /** Token ids that end generation (default: the checkpoint's eos ids). */
  stopTokenIds?: number[];
  /** Ends generation (finish reason "abort") between tokens, or between prefill chunks. */
  signal?: AbortSignal;
  /** Leave special tokens such as <|im_start|> out of the text (default false). */
  skipSpecialTokens?: boolean;
  /** Chat input only: the template's enable_thinking switch. */
  enableThinking?: boolean;
  /** Chat input only: tool descriptions for the template. */
  tools?: Record<string, unknown>[];
  /**
   * Traces to record in the prefill and every decode ("router" adds up in `session.expertLoad`, and
   * puts each step's router trace on its chunk).
   */
  capture?: CaptureName[];
}

/** Why generation ended: an eos id, a stop string, maxTokens, or the AbortSignal. */
export type FinishReason = "eos" | "stop" | "length" | "abort";

export interface GenerateTimings {
  promptTokens: number;
  generatedTokens: number;
  prefillMs: number;
  /** From the end of the prefill to the last token, sampling included. */
  decodeMs: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
}

export interface GenerateChunk {
  /** Text added since the previous chunk (empty while a character is incomplete or may start a stop string). */
  text: string;
  /** Token ids sampled for this chunk (the last chunk carries the eos id, when that ended generation). */
  tokens: number[];
  /**
   * With capture: ["router"], the routing of this chunk's token when it was fed to the model (absent
   * on a chunk that ends with an eos id, which is never fed).
   */
  router?: RouterTrace;
  /** With capture: ["router"], on the first chunk: the routing of the prompt. */
  promptRouter?: RouterTrace;
  /** Set on the last chunk only. */
  finishReason?: FinishReason;
  /** Set on the last chunk only. */
  timings?: GenerateTimings;
}

/** The prompt's token ids. */
export function promptTokens(ctx: GenerationContext, input: GenerateInput, options: GenerateOptions = {}): number[] {
  if (typeof input === "string") return ctx.tokenizer.encode(input);
  if (isChatMessages(input)) {
    const template = ctx.tokenizer.chatTemplate;
    if (!template) {
      throw new Error(
        `${ctx.tokenizer.dir}: no chat template (chat_template.jinja or chat_template in tokenizer_config.json); pass a string prompt instead`,
      );
    }
    return ctx.tokenizer.encode(
      template.render(input, { addGenerationPrompt: true, enableThinking: options.enableThinking, tools: options.tools }),
    );
  }
  if (Array.isArray(input) && input.every((v) => typeof v === "number")) return [...input];
  throw new TypeError("generate: input must be a string, chat messages ({role, content}[]) or token ids");
}

export async function* generate(
  session: ForwardSession,
  ctx: GenerationContext,
  input: GenerateInput,
  options: GenerateOptions = {},
): AsyncGenerator<GenerateChunk, void, undefined> {
  const maxTokens = options.maxTokens ?? 256;
  if (!Number.isInteger(maxTokens) || maxTokens < 0) throw new RangeError(`maxTokens must be an integer >= 0, got ${maxTokens}`);
  const prompt = promptTokens(ctx, input, options);
  if (prompt.length === 0) throw new RangeError("generate: the prompt is empty (there is nothing to continue)");
  const room = contextRoom(session, prompt.length);
  if (room < 0) {
    throw new RangeError(
      `generate: the prompt (${prompt.length} tokens) does not fit: the session holds ${session.position} of the model's ` +
        `${session.config.maxPositionEmbeddings} positions`,
    );
  }
  // Every generated token is fed to the session, so no more than the context holds after the prompt.
  const limit = Math.min(maxTokens, room);
  const sampler = new Sampler(
    resolveSampling(ctx.generationConfig.sampling, samplerOptions(options)),
    Math.min(ctx.tokenizer.vocabSize, session.config.vocabSize),
  );
  const stopIds = new Set(options.stopTokenIds ?? ctx.generationConfig.eosTokenIds);
  const stops = new StopStrings(options.stop === undefined ? [] : [options.stop].flat());
  const decoder = ctx.tokenizer.decodeStream({ skipSpecialTokens: options.skipSpecialTokens });
  const signal = options.signal;
  const capture = options.capture;

  const generated: number[] = [];
  const start = performance.now();
  let prefillEnd = start;
  const finish = (reason: FinishReason, text: string, tokens: number[] = []): GenerateChunk => {
    const end = performance.now();
    const prefillMs = prefillEnd - start;
    const decodeMs = end - prefillEnd;
    return {
      text,
      tokens,
      finishReason: reason,
      timings: {
        promptTokens: prompt.length,
        generatedTokens: generated.length,
        prefillMs,
        decodeMs,
        prefillTokensPerSecond: prefillMs > 0 ? (prompt.length * 1000) / prefillMs : 0,
        decodeTokensPerSecond: decodeMs > 0 ? (generated.length * 1000) / decodeMs : 0,
      },
    };
  };
  const rest = () => stops.push(decoder.flush()).text + stops.flush();

  let logits: Float32Array;
  // The prompt's routing rides on the first chunk.
  let promptRouter: RouterTrace | undefined;
  const first = (chunk: GenerateChunk): GenerateChunk => {
    if (promptRouter) chunk.promptRouter = promptRouter;
    promptRouter = undefined;
    return chunk;
  };
  try {
    const prefilled = await session.prefill(prompt, { signal, capture });
    logits = prefilled.logits.data;
    promptRouter = prefilled.router;
  } catch (e) {
    if (signal?.aborted) {
      prefillEnd = performance.now();
      yield finish("abort", "");
      return;
    }
    throw e;
  }
  prefillEnd = performance.now();

  for (;;) {
    if (signal?.aborted) return yield first(finish("abort", rest()));
    if (generated.length >= limit) return yield first(finish("length", rest()));
    const id = sampler.sample(logits, { prompt, generated });
    generated.push(id);
    if (stopIds.has(id)) return yield first(finish("eos", rest(), [id]));
    const shown = stops.push(decoder.push(id));
    // Feed the token before yielding, so the session holds everything that was shown. The last
    // one allowed needs no logits.
    const last = shown.stopped || generated.length >= limit;
    const step = await session.decode(id, { logits: last ? "none" : "last", capture });
    logits = step.logits.data;
    const router = step.router ? { router: step.router } : {};
    if (shown.stopped) return yield first({ ...finish("stop", shown.text, [id]), ...router });
    yield first({ text: shown.text, tokens: [id], ...router });
  }
}

/** Tokens that can still be generated after a prompt of `promptLength` tokens: the model's context
 * (max_position_embeddings) less what the session holds and the prompt; negative when the prompt does not fit. */
export function contextRoom(session: ForwardSession, promptLength: number): number {
  return session.config.maxPositionEmbeddings - session.position - promptLength;
}

// The caller's options over the checkpoint's defaults. Asking for top-k, top-p or min-p without a
// temperature means sampling, even where the defaults are greedy: temperature 1 then.
export function resolveSampling(defaults: SamplerOptions, given: SamplerOptions): SamplerOptions {
  const resolved = { ...defaults, ...given };
  const asksToSample = given.topK !== undefined || given.topP !== undefined || given.minP !== undefined;
  if (given.temperature === undefined && resolved.temperature === 0 && asksToSample) resolved.temperature = 1;
  return resolved;
}

function samplerOptions(o: GenerateOptions): SamplerOptions {
  const picked: SamplerOptions = {
    temperature: o.temperature,
    topK: o.topK,
    topP: o.topP,
    minP: o.minP,
    repetitionPenalty: o.repetitionPenalty,
    presencePenalty: o.presencePenalty,
    frequencyPenalty: o.frequencyPenalty,
    seed: o.seed,
  };
  for (const k of Object.keys(picked) as (keyof SamplerOptions)[]) if (picked[k] === undefined) delete picked[k];
  return picked;
}
