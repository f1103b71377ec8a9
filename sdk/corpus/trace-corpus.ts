// Tracing a corpus: every prompt of a JSONL file through the model with the chosen captures, written
// as Arrow IPC shards of a bounded number of tokens, with a manifest that lets an interrupted run
// resume where the last shard ended.
import * as fs from "node:fs";
import * as path from "node:path";
import { writeFileAtomic, manifestMismatch, newManifest, readManifest, writeManifest, MANIFEST_FILE, type ColumnEntry, type Manifest } from "./manifest";
import { toArrowIPC } from "../arrow";
import type { Model } from "../model";
import type { CaptureName } from "../forward";
import type { Session } from "../session";
import { tokenTexts } from "../trace/token-text";
import { captureLayout, CORPUS_CAPTURES } from "./columns";
import { checkPromptsFile, readPrompts, type PromptRecord } from "./prompts-file";
import { ShardBuffer } from "./shard-buffer";

export interface CorpusTraceOptions {
  /** The JSONL file: one {"text": ...} or {"ids": [...]} object per line, with an optional "id". */
  prompts: string;
  /** Output folder: manifest.json and shard-00000.arrow, shard-00001.arrow, ... */
  out: string;
  /** What to record for every token (names as in ForwardOptions.capture); default ["router"]. */
  capture?: string[];
  /** Tokens per shard (default: as many as fit in 256 MiB of captured values, at most 65,536). */
  shardTokens?: number;
  /** Start afresh: remove the folder's existing manifest and shards first. */
  overwrite?: boolean;
  /** Called after every prompt and every shard. */
  onProgress?: (progress: CorpusProgress) => void;
  /** Stops between forward calls; the rows traced so far are written as a last shard first. */
  signal?: AbortSignal;
}

export interface CorpusProgress {
  /** Prompts finished, of `total`. */
  prompts: number;
  total: number;
  /** Tokens traced (in shards or buffered). */
  tokens: number;
  /** Tokens held in memory for the next shard (at most the shard size). */
  buffered: number;
  shards: number;
  /** Set when a shard was just written. */
  shard?: string;
}

export interface CorpusTraceResult {
  manifest: Manifest;
  /** Paths of every shard, in corpus order. */
  shards: string[];
  /** Whether an earlier run's manifest was continued. */
  resumed: boolean;
  /** False when the signal stopped the run before the end. */
  complete: boolean;
}

const DEFAULT_SHARD_BYTES = 256 * 2 ** 20;
const MAX_DEFAULT_SHARD_TOKENS = 65_536;
const SHARD_NAME = /^shard-\d{5,}\.arrow(\.partial)?$/;

const shardName = (i: number) => `shard-${String(i).padStart(5, "0")}.arrow`;

function captureNames(capture: string[] | undefined): CaptureName[] {
  const given = capture ?? ["router"];
  if (given.length === 0) throw new Error(`corpus trace: capture is empty (known: ${CORPUS_CAPTURES.join(", ")})`);
  for (const name of given) {
    if (!(CORPUS_CAPTURES as readonly string[]).includes(name)) {
      throw new Error(`corpus trace: unknown capture '${name}' (known: ${CORPUS_CAPTURES.join(", ")})`);
    }
  }
  // One canonical order, so "residual,router" resumes a "router,residual" trace.
  return CORPUS_CAPTURES.filter((c) => given.includes(c));
}

/** Prepares the output folder: refuses foreign shards, removes leftovers of an interrupted write. */
function prepareOut(out: string, overwrite: boolean): void {
  if (fs.existsSync(out) && !fs.statSync(out).isDirectory()) throw new Error(`${out}: exists and is not a folder`);
  fs.mkdirSync(out, { recursive: true });
  const ours = fs.readdirSync(out).filter((f) => SHARD_NAME.test(f) || f === MANIFEST_FILE || f === `${MANIFEST_FILE}.partial`);
  if (overwrite) {
    for (const f of ours) fs.rmSync(path.join(out, f));
    return;
  }
  if (!ours.includes(MANIFEST_FILE) && ours.some((f) => f.endsWith(".arrow"))) {
    throw new Error(`${out}: holds shards but no ${MANIFEST_FILE}, so it cannot be resumed; use another folder, or start afresh (overwrite: true, --overwrite)`);
  }
}

/**
 * Traces every prompt of `options.prompts` and writes the shards to `options.out`. Run again with
 * the same prompts, model and captures after an interruption, it continues from the last shard.
 */
export async function traceCorpus(model: Model, options: CorpusTraceOptions): Promise<CorpusTraceResult> {
  const capture = captureNames(options.capture);
  const layout = captureLayout(model.config, capture);
  const shardTokens = options.shardTokens ?? Math.max(1, Math.min(MAX_DEFAULT_SHARD_TOKENS, Math.floor(DEFAULT_SHARD_BYTES / layout.forwardBytesPerToken)));
  if (!Number.isInteger(shardTokens) || shardTokens < 1) throw new Error(`corpus trace: shardTokens must be a positive integer, got ${shardTokens}`);
  const summary = await checkPromptsFile(options.prompts, (record) => checkLength(record, model));
  const out = options.out;
  prepareOut(out, options.overwrite ?? false);

  const tokenizer = model.tokenizer;
  const c = model.config;
  const columns: ColumnEntry[] = [
    { name: "prompt", type: "int32" },
    { name: "prompt_id", type: "utf8" },
    { name: "position", type: "int32" },
    { name: "token", type: "int32" },
    ...(tokenizer ? [{ name: "token_text", type: "utf8" as const }] : []),
    ...layout.columns.map((col) => ({ name: col.name, type: col.type, dims: col.dims, axes: col.axes, ...(col.layers ? { layers: col.layers } : {}) })),
  ];
  const wanted = newManifest({
    prompts: { file: options.prompts, sha256: summary.sha256, count: summary.count },
    model: { dir: model.dir, modelType: c.modelType, numLayers: c.numLayers, numExperts: c.numExperts, expertsPerToken: c.expertsPerToken, hiddenSize: c.hiddenSize, vocabSize: c.vocabSize },
    capture,
    columns,
  });
  const existing = readManifest(out);
  if (existing) {
    const mismatch = manifestMismatch(existing, wanted);
    if (mismatch) throw new Error(`${path.join(out, MANIFEST_FILE)}: cannot resume: ${mismatch}; use another folder, or start afresh (overwrite: true, --overwrite)`);
  }
  const manifest = existing ?? wanted;
  const resumed = existing !== undefined;
  // A shard written after the manifest's last one belongs to no manifest: it is written again.
  for (const f of fs.readdirSync(out)) {
    if (SHARD_NAME.test(f) && !manifest.shards.some((s) => s.file === f)) fs.rmSync(path.join(out, f));
  }
  writeManifest(out, manifest);

  const shardPaths = () => manifest.shards.map((s) => path.join(out, s.file));
  const report = (prompts: number, shard?: string) =>
    options.onProgress?.({ prompts, total: summary.count, tokens: manifest.tokens + buffer.rows, buffered: buffer.rows, shards: manifest.shards.length, shard });
  const buffer = new ShardBuffer(shardTokens, layout.columns, tokenizer !== undefined);
  let shardStart = { ...manifest.next };

  const flush = (next: { prompt: number; position: number }) => {
    if (buffer.rows === 0) return;
    const file = shardName(manifest.shards.length);
    writeFileAtomic(path.join(out, file), toArrowIPC(buffer.toTable(), "file"));
    manifest.shards.push({ file, rows: buffer.rows, start: shardStart, end: { ...next } });
    manifest.tokens += buffer.rows;
    manifest.next = { ...next };
    writeManifest(out, manifest);
    buffer.clear();
    shardStart = { ...next };
    report(next.prompt, file);
  };

  if (manifest.complete) {
    report(summary.count);
    return { manifest, shards: shardPaths(), resumed, complete: true };
  }

  const signal = options.signal;
  const session: Session = model.session();
  // The place just after the last traced token (buffered or in a shard).
  let done = { ...manifest.next };
  const stopped = () => {
    flush(done);
    return { manifest, shards: shardPaths(), resumed, complete: false };
  };
  report(done.prompt);
  try {
    for await (const record of readPrompts(options.prompts, done.prompt)) {
      const ids = promptIds(record, model);
      const texts = tokenizer ? tokenTexts(tokenizer, ids) : undefined;
      session.reset();
      let position = done.position;
      // Resuming inside a prompt: feed its traced part again, without captures.
      if (position > 0) await session.prefill(ids.slice(0, position), { logits: "none", signal });
      while (position < ids.length) {
        if (signal?.aborted) return stopped();
        const n = Math.min(ids.length - position, buffer.free);
        const result = await session.prefill(ids.slice(position, position + n), { logits: "none", capture, signal });
        buffer.append(record, result, texts?.slice(position, position + n));
        position += n;
        done = position < ids.length ? { prompt: record.index, position } : { prompt: record.index + 1, position: 0 };
        if (buffer.free === 0) flush(done);
      }
      report(done.prompt);
    }
    flush(done);
    manifest.complete = true;
    writeManifest(out, manifest);
    report(summary.count);
    return { manifest, shards: shardPaths(), resumed, complete: true };
  } catch (e) {
    // Aborted inside a forward call: that call's tokens were not kept; the buffered ones are.
    if (signal?.aborted) return stopped();
    throw e;
  } finally {
    session.dispose();
  }
}

function promptIds(record: PromptRecord, model: Model): number[] {
  return record.ids ?? model.tokenizer!.encode(record.text!);
}

// Up front, before anything runs: ids in the vocabulary, text only with a tokenizer, no prompt past
// the context. NFC at most triples a text and a UTF-16 unit is at most 3 UTF-8 bytes, each at most
// one byte-level token, so only texts of more than context / 9 units need to be tokenized to know.
function checkLength(record: PromptRecord, model: Model): void {
  const { vocabSize, maxPositionEmbeddings: context } = model.config;
  if (record.ids) {
    const bad = record.ids.find((id) => id >= vocabSize);
    if (bad !== undefined) throw new Error(`token id ${bad} is outside the vocabulary [0, ${vocabSize})`);
  } else if (!model.tokenizer) {
    throw new Error(`"text" needs a tokenizer, and ${model.dir} has no tokenizer.json; give "ids" instead`);
  }
  const tokens = record.ids?.length ?? (9 * record.text!.length <= context ? 0 : model.tokenizer!.encode(record.text!).length);
  if (tokens > context) throw new Error(`${tokens} tokens, more than the model's context (${context})`);
}
