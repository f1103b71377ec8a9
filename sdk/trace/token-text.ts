// Each token's own text (the token decoded alone), for the token_text column of Arrow exports.
// Decoded once per id and decoder: a trace of many tokens costs one decode per distinct id.
import type { TokenDecoder } from "../plot/labels";

const cache = new WeakMap<TokenDecoder, Map<number, string>>();

export function tokenTexts(decoder: TokenDecoder, ids: ArrayLike<number>): string[] {
  let known = cache.get(decoder);
  if (!known) cache.set(decoder, (known = new Map()));
  return Array.from(ids, (id) => {
    let text = known.get(id);
    if (text === undefined) known.set(id, (text = decoder.decode([id])));
    return text;
  });
}
