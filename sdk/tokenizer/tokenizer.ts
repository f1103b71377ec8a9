// A checkpoint's tokenizer: HF `tokenizers` (the Rust library) on tokenizer.json, plus the
// tokenizer_config.json facts the SDK needs (special-token strings, chat template).
import * as fs from "node:fs";
import * as path from "node:path";
import { ChatTemplate, loadChatTemplate } from "../chat/template";
import { codePointToUtf16Offsets } from "./offsets";
import { StreamDecoder } from "./stream-decoder";
import { TokenizerWorker, type AddedTokenInfo, type EncodeReply } from "./worker-bridge";

export type AddedToken = AddedTokenInfo;

export interface Encoding {
  ids: number[];
  /** The tokens' vocabulary strings (byte-level: "Ġ" is a space). */
  tokens: string[];
  /** [start, end) of each token in the input, in UTF-16 units: `text.slice(start, end)`. */
  offsets: [number, number][];
}

export interface DecodeOptions {
  /** Drop special tokens (<|im_end|>...) from the text (default false, so decode(encode(x)) === x). */
  skipSpecialTokens?: boolean;
}

// A tokenizer dropped without close() stops its worker when it is garbage-collected.
const workers = new FinalizationRegistry<TokenizerWorker>((worker) => worker.close());

export class Tokenizer {
  /** Number of token ids the tokenizer defines (highest id + 1); a model's logits may have more rows. */
  readonly vocabSize: number;
  /** Tokens matched whole before BPE (special ones and others such as <think>). */
  readonly addedTokens: readonly AddedToken[];
  /** The checkpoint's chat template, when it ships one. */
  readonly chatTemplate: ChatTemplate | undefined;
  /** tokenizer_config.json's eos_token as an id, when set. */
  readonly eosTokenId: number | undefined;

  /** @internal */
  constructor(
    readonly dir: string,
    private readonly worker: TokenizerWorker,
    vocabSize: number,
    addedTokens: AddedToken[],
    chatTemplate: ChatTemplate | undefined,
  ) {
    this.vocabSize = vocabSize;
    this.addedTokens = addedTokens;
    this.chatTemplate = chatTemplate;
    const eos = chatTemplate?.tokens.eos_token;
    this.eosTokenId = eos !== undefined ? this.tokenToId(eos) : undefined;
    workers.register(this, worker, this);
  }

  /** Token ids of `text`. Special tokens written in the text are matched; no BOS is added. */
  encode(text: string): number[] {
    return this.encodeWithOffsets(text).ids;
  }

  /** Ids, token strings and the text span of each token (for plots). */
  encodeWithOffsets(text: string): Encoding {
    if (typeof text !== "string") throw new TypeError(`encode: text must be a string, got ${typeof text}`);
    const r = this.worker.call<EncodeReply>({ op: "encode", text });
    return { ids: r.ids, tokens: r.tokens, offsets: codePointToUtf16Offsets(text, r.offsets) };
  }

  /** Text of `ids`. */
  decode(ids: ArrayLike<number>, options: DecodeOptions = {}): string {
    const list = Array.from(ids);
    for (let i = 0; i < list.length; i++) {
      const id = list[i];
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new RangeError(`decode: token id ${id} at index ${i} is not an integer in [0, ${this.vocabSize})`);
      }
    }
    return this.worker.call<string>({ op: "decode", ids: list, skipSpecialTokens: options.skipSpecialTokens ?? false });
  }

  /** A decoder for ids arriving one by one: each push returns the text completed so far. */
  decodeStream(options: DecodeOptions = {}): StreamDecoder {
    return new StreamDecoder(this, options);
  }

  /** The vocabulary string of `id`, or undefined when the id is unknown. */
  idToToken(id: number): string | undefined {
    return this.worker.call<string | null>({ op: "idToToken", id }) ?? undefined;
  }

  /** The id of a vocabulary string (or added token), or undefined. */
  tokenToId(token: string): number | undefined {
    return this.worker.call<number | null>({ op: "tokenToId", token }) ?? undefined;
  }

  /** Stops the tokenizer's worker thread (optional: an idle tokenizer does not keep the process alive). */
  close(): void {
    workers.unregister(this);
    this.worker.close();
  }
}

/**
 * Loads the tokenizer of a checkpoint folder: `tokenizer.json` (required) and
 * `tokenizer_config.json` / `chat_template.jinja` (optional).
 */
export async function loadTokenizer(dir: string): Promise<Tokenizer> {
  const resolved = path.resolve(dir);
  const file = path.join(resolved, "tokenizer.json");
  if (!fs.existsSync(file)) throw new Error(`${file}: no such file (loadTokenizer needs a folder with tokenizer.json)`);
  const config = readTokenizerConfig(resolved);
  const chatTemplate = loadChatTemplate(resolved, config);
  const { worker, ready } = await TokenizerWorker.start(file);
  return new Tokenizer(resolved, worker, ready.vocabSize, ready.addedTokens, chatTemplate);
}

/** tokenizer_config.json of a checkpoint folder as an object ({} when the file is absent). */
export function readTokenizerConfig(dir: string): Record<string, unknown> {
  const file = path.join(dir, "tokenizer_config.json");
  if (!fs.existsSync(file)) return {};
  try {
    const config: unknown = JSON.parse(fs.readFileSync(file, "utf8"));
    if (typeof config !== "object" || config === null || Array.isArray(config)) throw new Error("not a JSON object");
    return config as Record<string, unknown>;
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message}`);
  }
}
