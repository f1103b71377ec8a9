// Corpus tracing: a JSONL file of prompts through the model, captures written as Arrow shards.
export { traceCorpus, type CorpusTraceOptions, type CorpusProgress, type CorpusTraceResult } from "./trace-corpus";
export { CORPUS_CAPTURES } from "./columns";
export type { Manifest, ShardEntry, ColumnEntry, CorpusCursor } from "./manifest";
