// Which tokens a trace covers: the ids fed and their absolute positions in the session.
import type { TokenDecoder } from "../plot/labels";
import { tokenTexts } from "./token-text";

export interface TokenSpan {
  /** Token ids fed by the call, in order. */
  ids: Int32Array;
  /** Absolute position of the first of them. */
  start: number;
  /** The model's tokenizer, when it has one: Arrow exports then carry each token's text. */
  tokenizer?: TokenDecoder;
}

export function positionsOf(span: TokenSpan): number[] {
  return Array.from(span.ids, (_, i) => span.start + i);
}

/** Each token's own text, when the span knows its tokenizer (or one is given). */
export function spanTexts(span: TokenSpan, tokenizer: TokenDecoder | undefined = span.tokenizer): string[] | undefined {
  return tokenizer ? tokenTexts(tokenizer, span.ids) : undefined;
}

/**
 * The span of consecutive calls (a prefill, then its decode steps): each must start where the one
 * before it ended.
 */
export function concatSpans(spans: TokenSpan[], what: string): TokenSpan {
  if (spans.length === 0) throw new RangeError(`${what}: no traces to concatenate`);
  let end = spans[0].start;
  spans.forEach((s, i) => {
    if (s.start !== end) {
      throw new RangeError(`${what}: trace ${i} starts at position ${s.start}, but the one before it ends at ${end} (positions must be continuous)`);
    }
    end += s.ids.length;
  });
  const ids = new Int32Array(end - spans[0].start);
  let offset = 0;
  for (const s of spans) {
    ids.set(s.ids, offset);
    offset += s.ids.length;
  }
  const span: TokenSpan = { ids, start: spans[0].start };
  const tokenizer = spans.find((s) => s.tokenizer)?.tokenizer;
  if (tokenizer) span.tokenizer = tokenizer;
  return span;
}
