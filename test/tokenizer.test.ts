// Tokenizer parity: ids, offsets and decodings equal Python `tokenizers` (scripts/tokenizer-reference)
// for every string of test/data/tokenizer-corpus.json, for every tokenizer in test/data/tokenizer-dirs.json.
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadTokenizer, type Tokenizer } from "moelens";
const dataDir = path.join(__dirname, "data");
const tokenizerDirs: { name: string; dir: string; vocabSize: number }[] = JSON.parse(
  fs.readFileSync(path.join(dataDir, "tokenizer-dirs.json"), "utf8"),
).tokenizers.map((t: { dir: string }) => ({ ...t, dir: path.resolve(__dirname, "..", t.dir) }));

interface CorpusEntry {
  category: string;
  text: string;
  nfc: boolean;
}
interface Reference {
  ids: number[];
  offsets: [number, number][];
  decoded: string;
  decodedSkipSpecial: string;
}

const corpus: CorpusEntry[] = JSON.parse(fs.readFileSync(path.join(dataDir, "tokenizer-corpus.json"), "utf8")).strings;

// UTF-16 offsets back to code points, the unit Python reports.
function toCodePoints(text: string, offsets: [number, number][]): [number, number][] {
  const cp = (u: number) => [...text.slice(0, u)].length;
  return offsets.map(([s, e]) => [cp(s), cp(e)]);
}

it("the corpus has at least 200 strings of every required kind", () => {
  expect(corpus.length).toBeGreaterThanOrEqual(200);
  const categories = new Set(corpus.map((c) => c.category));
  for (const c of ["emoji", "cjk", "combining", "rtl", "whitespace", "digits", "code", "special"]) {
    expect(categories, c).toContain(c);
  }
  for (const c of corpus) expect(c.nfc, JSON.stringify(c.text)).toBe(c.text === c.text.normalize("NFC"));
});

describe.each(tokenizerDirs)("tokenizer $name", ({ name, dir, vocabSize }) => {
  let tok: Tokenizer;
  const reference: Reference[] = JSON.parse(
    fs.readFileSync(path.join(dataDir, "tokenizer-reference", `tokenizer-${name}.json`), "utf8"),
  ).strings;

  beforeAll(async () => {
    tok = await loadTokenizer(dir);
  });
  afterAll(() => tok?.close());

  it("has the reference's size and one entry per corpus string", () => {
    expect(tok.vocabSize).toBe(vocabSize);
    expect(reference.length).toBe(corpus.length);
  });

  it("encodes every corpus string to HF's ids", () => {
    const wrong = corpus.filter((c, i) => JSON.stringify(tok.encode(c.text)) !== JSON.stringify(reference[i].ids));
    expect(wrong.map((c) => c.text)).toEqual([]);
  });

  it("gives HF's offsets, as UTF-16 spans of the input", () => {
    corpus.forEach((c, i) => {
      const e = tok.encodeWithOffsets(c.text);
      expect(toCodePoints(c.text, e.offsets), JSON.stringify(c.text)).toEqual(reference[i].offsets);
      expect(e.tokens.length).toBe(e.ids.length);
    });
  });

  it("decodes like HF, with and without special tokens", () => {
    corpus.forEach((c, i) => {
      expect(tok.decode(reference[i].ids), JSON.stringify(c.text)).toBe(reference[i].decoded);
      expect(tok.decode(reference[i].ids, { skipSpecialTokens: true })).toBe(reference[i].decodedSkipSpecial);
    });
  });

  it("round-trips: decode(encode(x)) === x (NFC form for the inputs NFC changes)", () => {
    for (const c of corpus) {
      expect(tok.decode(tok.encode(c.text))).toBe(c.nfc ? c.text : c.text.normalize("NFC"));
    }
  });

  it("streams text one token at a time, holding back incomplete characters", () => {
    for (const c of corpus) {
      const ids = tok.encode(c.text);
      const stream = tok.decodeStream();
      const pieces = ids.map((id) => stream.push(id));
      pieces.push(stream.flush());
      expect(pieces.join(""), JSON.stringify(c.text)).toBe(tok.decode(ids));
      // No piece ends inside a character (a lone high surrogate or a byte-level U+FFFD).
      for (const p of pieces) {
        expect(/[\uD800-\uDBFF]$/.test(p)).toBe(false);
        if (!c.text.includes("\uFFFD")) expect(p.includes("\uFFFD")).toBe(false);
      }
    }
  });
});

describe("tokenizer details", () => {
  let tok: Tokenizer;
  beforeAll(async () => {
    tok = await loadTokenizer(tokenizerDirs[0].dir);
  });
  afterAll(() => tok?.close());

  it("matches special tokens inline and adds no BOS", () => {
    const imEnd = tok.tokenToId("<|im_end|>")!;
    expect(tok.encode("<|im_end|>")).toEqual([imEnd]);
    expect(tok.encode("")).toEqual([]);
    expect(tok.encode("a<|im_end|>").slice(-1)).toEqual([imEnd]);
    expect(tok.eosTokenId).toBe(imEnd);
    expect(tok.addedTokens.find((t) => t.content === "<|im_end|>")).toEqual({ id: imEnd, content: "<|im_end|>", special: true });
    expect(tok.addedTokens.find((t) => t.content === "<think>")?.special).toBe(false);
  });

  it("emits a 4-byte emoji only once its last byte arrives", () => {
    const ids = tok.encode("🫠"); // three byte-level pieces in Qwen3's vocabulary
    expect(ids.length).toBe(3);
    const stream = tok.decodeStream();
    const pieces = ids.map((id) => stream.push(id));
    expect(pieces.slice(0, -1).every((p) => p === "")).toBe(true);
    expect(pieces[pieces.length - 1]).toBe("🫠");
  });

  it("gives offsets that slice the input (emoji take two UTF-16 units)", () => {
    const text = "a😀 b";
    const e = tok.encodeWithOffsets(text);
    expect(e.offsets.map(([s, t]) => text.slice(s, t)).join("")).toBe(text);
  });

  it("rejects ids outside the vocabulary and missing folders with the path", async () => {
    expect(() => tok.decode([tok.vocabSize])).toThrow(/not an integer in \[0, 151669\)/);
    await expect(loadTokenizer("/nonexistent/dir")).rejects.toThrow(/\/nonexistent\/dir\/tokenizer\.json/);
  });
});
