// manifest.json of a corpus trace: what was traced, with which settings, which shards hold it and
// where to resume. Rewritten atomically (a temporary file renamed over it) after each shard, so an
// interrupted run leaves either the old manifest or the new one, never half of one.
import * as fs from "node:fs";
import * as path from "node:path";

export const MANIFEST_FILE = "manifest.json";
const FORMAT = "moelens corpus trace";
const VERSION = 1;

/** A place in the corpus: a prompt and a token position inside it. */
export interface CorpusCursor {
  prompt: number;
  position: number;
}

export interface ShardEntry {
  file: string;
  /** Rows (tokens) in the shard. */
  rows: number;
  /** The first row's place, and the place just after the last row. */
  start: CorpusCursor;
  end: CorpusCursor;
}

export interface ColumnEntry {
  name: string;
  type: "int32" | "float32" | "utf8";
  /** Per-token shape of list columns. */
  dims?: number[];
  axes?: string[];
  layers?: number[];
}

export interface Manifest {
  format: typeof FORMAT;
  version: typeof VERSION;
  prompts: { file: string; sha256: string; count: number };
  model: { dir: string; modelType: string; numLayers: number; numExperts: number; expertsPerToken: number; hiddenSize: number; vocabSize: number };
  capture: string[];
  columns: ColumnEntry[];
  shards: ShardEntry[];
  /** Where the next shard starts. */
  next: CorpusCursor;
  tokens: number;
  complete: boolean;
}

export function newManifest(fields: Pick<Manifest, "prompts" | "model" | "capture" | "columns">): Manifest {
  return { format: FORMAT, version: VERSION, ...fields, shards: [], next: { prompt: 0, position: 0 }, tokens: 0, complete: false };
}

/** The manifest in `dir`, or undefined when there is none. */
export function readManifest(dir: string): Manifest | undefined {
  const file = path.join(dir, MANIFEST_FILE);
  if (!fs.existsSync(file)) return undefined;
  let m: Manifest;
  try {
    m = JSON.parse(fs.readFileSync(file, "utf8")) as Manifest;
  } catch (e) {
    throw new Error(`${file}: not a readable manifest (${(e as Error).message})`);
  }
  if (m?.format !== FORMAT) throw new Error(`${file}: not a corpus trace manifest (no "format": "${FORMAT}")`);
  if (m.version !== VERSION) throw new Error(`${file}: manifest version ${m.version}; this moelens reads version ${VERSION}`);
  return m;
}

/** Writes the manifest: to a temporary file, flushed to disk, then renamed over the old one. */
export function writeManifest(dir: string, manifest: Manifest): void {
  writeFileAtomic(path.join(dir, MANIFEST_FILE), JSON.stringify(manifest, null, 1) + "\n");
}

export function writeFileAtomic(file: string, data: string | Uint8Array): void {
  const temporary = `${file}.partial`;
  const fd = fs.openSync(temporary, "w");
  try {
    fs.writeFileSync(fd, data);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(temporary, file);
}

/**
 * How an existing manifest differs from this run's settings, or undefined when it may be resumed.
 * The shard size may change between runs; the prompts, model and captures may not.
 */
export function manifestMismatch(existing: Manifest, wanted: Manifest): string | undefined {
  if (existing.prompts.sha256 !== wanted.prompts.sha256) return `the prompts differ (${existing.prompts.file} had sha256 ${existing.prompts.sha256.slice(0, 12)}…, ${wanted.prompts.file} has ${wanted.prompts.sha256.slice(0, 12)}…)`;
  const a = existing.model;
  const b = wanted.model;
  if (a.dir !== b.dir) return `the model differs (${a.dir}, now ${b.dir})`;
  if (JSON.stringify(a) !== JSON.stringify(b)) return `the model's shape differs`;
  if (existing.capture.join(",") !== wanted.capture.join(",")) return `the captures differ (${existing.capture.join(",")}, now ${wanted.capture.join(",")})`;
  return undefined;
}
