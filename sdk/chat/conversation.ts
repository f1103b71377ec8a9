// A multi-turn chat on one session that re-feeds only what changed. Each turn renders the whole
// conversation with the chat template and feeds the tokens past what the session already holds.
// Templates may rewrite history: Qwen's drop the reasoning of earlier assistant turns, and some open
// the reply with "<think>\n" that the history form lacks. So each prompt is fed in two parts, split
// where the rendering of a finished turn would start to differ, and the state at the split is kept
// as a fork to resume from next turn.
import {
  generate,
  type GenerateChunk,
  type GenerateOptions,
  type GenerateTimings,
  type GenerationContext,
} from "../generate/generate";
import type { Session } from "../session";
import type { ChatMessage } from "./message";

export interface ConversationOptions {
  /** A system prompt, as the first message. */
  system?: string;
  /** The template's enable_thinking switch, for every turn. */
  enableThinking?: boolean;
  /** Tool descriptions for the template, for every turn. */
  tools?: Record<string, unknown>[];
}

interface Snapshot {
  tokens: number[];
  session: Session;
}

export class Conversation {
  readonly messages: ChatMessage[] = [];
  /** Tokens the live session holds, in order. */
  private held: number[] = [];
  private snapshot: Snapshot | undefined;
  private fedLastTurn = 0;

  /** @internal Use `model.conversation()`. */
  constructor(
    private session: Session,
    private readonly ctx: GenerationContext,
    private readonly options: ConversationOptions = {},
  ) {
    if (!ctx.tokenizer.chatTemplate) throw new Error(`${ctx.tokenizer.dir}: no chat template, so no conversation`);
    if (session.position !== 0) throw new Error("Conversation: the session must be empty (position 0)");
    if (options.system !== undefined) this.messages.push({ role: "system", content: options.system });
  }

  /** Prompt tokens the last turn had to feed (the rest of its rendering was already in the session). */
  get promptTokensFed(): number {
    return this.fedLastTurn;
  }

  /** Adds a user message and streams the assistant's reply (which then joins the history). */
  async *send(content: string, options: GenerateOptions = {}): AsyncGenerator<GenerateChunk, void, undefined> {
    const user: ChatMessage = { role: "user", content };
    const ids = this.encode([...this.messages, user], true);
    // Where this prompt and the history form of a finished reply part ways.
    const finished = this.encode([...this.messages, user, { role: "assistant", content: "x" }], false);
    const split = Math.min(commonPrefix(ids, finished), ids.length - 1);
    this.resumeFrom(ids);
    this.messages.push(user);
    this.fedLastTurn = ids.length - this.held.length;

    let reply = "";
    const sampled: number[] = [];
    let finishedByEos = false;
    const firstPart = { tokens: Math.max(0, split - this.held.length), ms: 0 };
    try {
      if (firstPart.tokens > 0) {
        const start = performance.now();
        try {
          await this.session.prefill(ids.slice(this.held.length, split), { signal: options.signal });
          firstPart.ms = performance.now() - start;
          this.held = ids.slice(0, split);
          this.snapshot = { tokens: this.held.slice(), session: this.session.fork() };
        } catch (e) {
          // Aborted: generate() below sees the signal before feeding anything and ends with "abort".
          if (!options.signal?.aborted) throw e;
        }
      }
      for await (const chunk of generate(this.session, this.ctx, ids.slice(this.held.length), options)) {
        reply += chunk.text;
        sampled.push(...chunk.tokens);
        finishedByEos = chunk.finishReason === "eos";
        yield chunk.timings ? { ...chunk, timings: withFirstPart(chunk.timings, firstPart) } : chunk;
      }
    } finally {
      // The session holds the prompt and every sampled token but a final eos (see generate()), or,
      // after an abort in the prefill, the part of the prompt it got.
      const all = [...ids, ...(finishedByEos ? sampled.slice(0, -1) : sampled)];
      this.held = all.slice(0, this.session.position);
      this.messages.push({ role: "assistant", content: reply });
    }
  }

  private encode(messages: ChatMessage[], addGenerationPrompt: boolean): number[] {
    const { tokenizer } = this.ctx;
    return tokenizer.encode(
      tokenizer.chatTemplate!.render(messages, {
        addGenerationPrompt,
        enableThinking: this.options.enableThinking,
        tools: this.options.tools,
      }),
    );
  }

  // Continues the live session if it holds a prefix of `ids`, else the snapshot if it does, else
  // starts over.
  private resumeFrom(ids: number[]): void {
    if (this.held.length < ids.length && commonPrefix(this.held, ids) === this.held.length) return;
    const snap = this.snapshot;
    if (snap && snap.tokens.length < ids.length && commonPrefix(snap.tokens, ids) === snap.tokens.length) {
      this.session = snap.session.fork();
      this.held = snap.tokens.slice();
      return;
    }
    this.session.reset();
    this.held = [];
  }
}

// The timings of the whole prompt, both parts.
function withFirstPart(t: GenerateTimings, first: { tokens: number; ms: number }): GenerateTimings {
  const promptTokens = t.promptTokens + first.tokens;
  const prefillMs = t.prefillMs + first.ms;
  return { ...t, promptTokens, prefillMs, prefillTokensPerSecond: prefillMs > 0 ? (promptTokens * 1000) / prefillMs : 0 };
}

function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
