// Generated arithmetic for the "arithmetic" domain: worked sums, differences, products, divisions
// with remainders and two-step expressions, in a few phrasings. Seeded, so every run writes the
// same text; the held-out documents come from a different seed than the training documents.
import type { Document, Split } from "./document";

/** mulberry32: a small, fast, seedable PRNG (uniform in [0, 1)). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Rand = () => number;
const int = (r: Rand, lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1));
// Operands of 1 to 4 digits, smaller ones more often.
const operand = (r: Rand) => int(r, 0, [9, 99, 999, 9999][Math.min(3, Math.floor(r() * r() * 4))]);

const KINDS: Record<string, (r: Rand) => string> = {
  sum: (r) => {
    const a = operand(r), b = operand(r);
    return `${a} + ${b} = ${a + b}`;
  },
  difference: (r) => {
    const a = operand(r), b = operand(r);
    return `${Math.max(a, b)} - ${Math.min(a, b)} = ${Math.abs(a - b)}`;
  },
  product: (r) => {
    const a = int(r, 0, 99), b = int(r, 0, r() < 0.7 ? 12 : 99);
    return `${a} * ${b} = ${a * b}`;
  },
  division: (r) => {
    const b = int(r, 1, 12), q = int(r, 0, 99), rem = int(r, 0, b - 1);
    const a = b * q + rem;
    return rem === 0 ? `${a} / ${b} = ${q}` : `${a} / ${b} = ${q} remainder ${rem}`;
  },
  twoStep: (r) => {
    const a = int(r, 1, 50), b = int(r, 1, 50), c = int(r, 2, 9);
    return r() < 0.5 ? `(${a} + ${b}) * ${c} = ${a + b} * ${c} = ${(a + b) * c}` : `${a} * ${c} + ${b} = ${a * c} + ${b} = ${a * c + b}`;
  },
  words: (r) => {
    const a = operand(r), b = operand(r);
    const pick = int(r, 0, 2);
    if (pick === 0) return `What is ${a} plus ${b}? The answer is ${a + b}.`;
    if (pick === 1) return `What is ${Math.max(a, b)} minus ${Math.min(a, b)}? The answer is ${Math.abs(a - b)}.`;
    const x = int(r, 0, 30), y = int(r, 0, 30);
    return `What is ${x} times ${y}? The answer is ${x * y}.`;
  },
  compare: (r) => {
    const a = operand(r), b = operand(r);
    return a === b ? `${a} = ${b}` : a > b ? `${a} > ${b}` : `${a} < ${b}`;
  },
};
const KIND_NAMES = Object.keys(KINDS);

function document(r: Rand, split: Split): Document {
  // A document mixes lines of one main kind with a few of the others.
  const main = KIND_NAMES[int(r, 0, KIND_NAMES.length - 1)];
  const lines: string[] = [];
  const n = int(r, 24, 48);
  for (let i = 0; i < n; i++) {
    const kind = r() < 0.75 ? main : KIND_NAMES[int(r, 0, KIND_NAMES.length - 1)];
    lines.push(KINDS[kind](r));
  }
  return { domain: "arithmetic", genre: main, source: "generated", license: "generated", text: lines.join("\n"), split };
}

export function arithmeticDocuments(trainCount = 3000, heldoutCount = 150): Document[] {
  const train = mulberry32(20261130);
  const heldout = mulberry32(77);
  const docs: Document[] = [];
  for (let i = 0; i < trainCount; i++) docs.push(document(train, "train"));
  for (let i = 0; i < heldoutCount; i++) docs.push(document(heldout, "heldout"));
  return docs;
}
