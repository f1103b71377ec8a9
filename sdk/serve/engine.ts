// The engine behind the HTTP endpoints: one generation at a time on the model (sessions share the
// CPU), behind the bounded queue, resuming from the prefix cache.
//
// A request forks the longest cached session whose history starts its prompt, feeds the prompt up to
// its last token, keeping forks of that state (and at the job's checkpoints) for later requests, then
// generates from the last prompt token. Keeping the state one token short lets an identical prompt
// reuse all but that token. Sessions the engine lets go of are disposed of at once, so their native
// memory does not wait for garbage collection.
import type { GenerateOptions, FinishReason } from "../generate/generate";
import type { Model } from "../model";
import type { CaptureName } from "../forward";
import type { Session } from "../session";
import { PrefixCache, type PrefixCacheLimits } from "./prefix-cache";
import { RequestQueue, type QueuePlace } from "./request-queue";
import { mergeLoads, routingSummary, type RoutingSummary } from "./routing-summary";

export interface GenerationJob {
  /** The whole prompt's token ids (at least one). */
  prompt: number[];
  /** More prompt lengths at which to keep the state for later requests (ascending). */
  checkpoints?: number[];
  /** Sampling, stopping and token limit (the signal and capture are the engine's). */
  options: Omit<GenerateOptions, "signal" | "capture">;
  /** Capture the router and report the request's expert load. */
  routing: boolean;
  /** Aborts the generation (the client went away); the request also leaves the queue. */
  signal: AbortSignal;
}

export interface GenerationOutcome {
  finishReason: FinishReason;
  promptTokens: number;
  /** Prompt tokens taken from the prefix cache rather than fed. */
  cachedTokens: number;
  /** Tokens sampled (an eos id included). */
  completionTokens: number;
  /** Time spent waiting for the engine. */
  queueMs: number;
  /** Time feeding the prompt (the part not cached). */
  prefillMs: number;
  decodeMs: number;
  decodeTokensPerSecond: number;
  routing?: RoutingSummary;
}

export interface EngineOptions {
  /** Requests that may wait while one runs. */
  maxQueue: number;
  prefixCache: PrefixCacheLimits;
}

export class Engine {
  readonly queue: RequestQueue;
  readonly cache: PrefixCache;

  constructor(
    private readonly model: Model,
    options: EngineOptions,
  ) {
    this.queue = new RequestQueue(options.maxQueue);
    this.cache = new PrefixCache(options.prefixCache);
  }

  /** A place in the queue, or a 503 ApiError when it is full. Give it to run(). */
  reserve(signal: AbortSignal): QueuePlace {
    return this.queue.reserve(signal);
  }

  /**
   * Waits for the place's turn, generates, and hands the text to `onText` piece by piece. Rejects
   * with the signal's reason when it aborts before generation starts; an abort during generation
   * resolves with finish reason "abort". Always releases the place.
   */
  async run(place: QueuePlace, job: GenerationJob, onText: (text: string) => void): Promise<GenerationOutcome> {
    const { prompt, signal } = job;
    if (prompt.length === 0) throw new RangeError("the prompt is empty");
    const queued = performance.now();
    let session: Session | undefined;
    try {
      await place.ready;
      const start = performance.now();
      const capture: CaptureName[] | undefined = job.routing ? ["router"] : undefined;
      // A routing request needs the load of the cached part too.
      const entry = this.cache.lookup(prompt, job.routing ? (e) => e.load !== undefined : undefined);
      session = entry ? entry.session.fork() : this.model.session();
      const base = job.routing ? entry?.load : undefined;
      const cachedTokens = entry?.tokens.length ?? 0;

      // Feed all but the last prompt token, keeping the state at each checkpoint and at the end.
      for (const end of [...(job.checkpoints ?? []), prompt.length - 1]) {
        if (end <= session.position) continue;
        await session.prefill(prompt.slice(session.position, end), { logits: "none", capture, signal });
        if (this.cache.enabled) this.cache.add(prompt.slice(0, end), session.fork(), mergeLoads(base, session.expertLoad));
      }
      const headMs = performance.now() - start;

      const history = [...prompt];
      let last;
      for await (const chunk of session.generate(prompt.slice(-1), { ...job.options, signal, capture })) {
        if (chunk.text !== "") onText(chunk.text);
        history.push(...chunk.tokens);
        last = chunk;
      }
      const timings = last!.timings!;
      const finishReason = last!.finishReason!;
      if (finishReason === "eos") history.pop(); // sampled, not fed
      const load = mergeLoads(base, session.expertLoad);
      // An abort inside the last prompt token's prefill leaves the session short of the history.
      if (this.cache.enabled && session.position === history.length) this.cache.add(history, session.fork(), load);
      return {
        finishReason,
        promptTokens: prompt.length,
        cachedTokens,
        completionTokens: timings.generatedTokens,
        queueMs: start - queued,
        prefillMs: headMs + timings.prefillMs,
        decodeMs: timings.decodeMs,
        decodeTokensPerSecond: timings.decodeTokensPerSecond,
        routing: job.routing && load ? routingSummary(load) : undefined,
      };
    } finally {
      place.release();
      session?.dispose();
    }
  }
}
