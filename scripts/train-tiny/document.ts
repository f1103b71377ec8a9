// One training or held-out document of the embedded model's data, with its domain label.

export type Domain = "prose" | "code" | "arithmetic";
export type Split = "train" | "heldout";

export interface Document {
  domain: Domain;
  /** Brown genre, npm package name, or arithmetic exercise kind. */
  genre: string;
  /** Where the text comes from (corpus file, package path, generator). */
  source: string;
  license: string;
  text: string;
  split?: Split;
}

/** FNV-1a hash of a string: a stable, platform-independent way to pick held-out documents. */
export function stableHash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}
