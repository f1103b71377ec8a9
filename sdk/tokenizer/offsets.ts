// HF tokenizers report offsets in code points; JS strings index UTF-16 code units. Emoji and other
// characters outside the BMP take two units, so the two differ after the first such character.

/** Maps code-point offsets into `text` to UTF-16 offsets (`text.slice(start, end)` is the span). */
export function codePointToUtf16Offsets(text: string, offsets: [number, number][]): [number, number][] {
  // utf16At[c] = UTF-16 index of code point c (and of the end, for c = number of code points)
  const utf16At: number[] = [];
  let unit = 0;
  for (const ch of text) {
    utf16At.push(unit);
    unit += ch.length;
  }
  utf16At.push(unit);
  const at = (c: number) => utf16At[Math.min(c, utf16At.length - 1)];
  return offsets.map(([start, end]) => [at(start), at(end)]);
}
