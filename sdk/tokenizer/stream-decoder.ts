// Turns a stream of token ids into text deltas. Byte-level tokens can end in the middle of a UTF-8
// character; such a piece decodes to U+FFFD, so its text is held back until a later token completes
// the character. Only a short window of ids is re-decoded each time, so cost stays constant per token.

export interface IdDecoder {
  decode(ids: number[], options?: { skipSpecialTokens?: boolean }): string;
}

const REPLACEMENT = "\uFFFD";

export class StreamDecoder {
  // ids[0..read) were already turned into text; ids[0..read) is kept as left context because some
  // decoders (Metaspace, WordPiece) render a token differently at the start of a string.
  private ids: number[] = [];
  private read = 0;

  constructor(
    private readonly tokenizer: IdDecoder,
    private readonly options: { skipSpecialTokens?: boolean } = {},
  ) {}

  /** Adds tokens; returns the text they complete ("" while a character is still incomplete). */
  push(...ids: number[]): string {
    this.ids.push(...ids);
    const before = this.read > 0 ? this.decode(this.ids.slice(0, this.read)) : "";
    const all = this.decode(this.ids);
    if (all.length <= before.length || all.endsWith(REPLACEMENT)) return "";
    // Keep the last emitted tokens as context for the next call.
    this.ids = this.ids.slice(this.read);
    this.read = this.ids.length;
    return all.slice(before.length);
  }

  /** The text still held back (an incomplete character comes out as U+FFFD); resets the decoder. */
  flush(): string {
    const before = this.read > 0 ? this.decode(this.ids.slice(0, this.read)) : "";
    const all = this.decode(this.ids);
    this.ids = [];
    this.read = 0;
    return all.slice(before.length);
  }

  private decode(ids: number[]): string {
    return this.tokenizer.decode(ids, this.options);
  }
}
