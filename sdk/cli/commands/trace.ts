// `moelens trace`: a corpus of prompts through the model, captures written as Arrow shards
// (docs/introspection.md, "Tracing a corpus"). Interrupted (Ctrl+C, or killed), the same command
// resumes after the last shard.
import * as path from "node:path";
import { CORPUS_CAPTURES, traceCorpus, type CorpusProgress } from "../../corpus";
import { UsageError } from "../errors";
import { loadModel } from "../load-model";
import { integerAtLeast, numberFlag, parseFlags } from "../flags";
import { modelFlags } from "../options";
import { progressBar } from "../progress";

const FLAGS = {
  prompts: { type: "string" },
  out: { type: "string" },
  capture: { type: "string", multiple: true },
  "shard-tokens": { type: "string" },
  overwrite: { type: "boolean" },
  model: { type: "string" },
  backend: { type: "string" },
  threads: { type: "string" },
  precision: { type: "string" },
  emulator: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

export function traceHelpText(): string {
  return `moelens trace: run a corpus of prompts through the model and write what it does as Arrow shards

Usage:
  moelens trace --prompts FILE.jsonl --out DIR [--capture router,residual] [--shard-tokens N]

The prompts file has one JSON object per line: {"text": "..."} or {"ids": [1, 2, 3]}, with an
optional "id" (string or number) that names the prompt in the shards. Each shard
(DIR/shard-00000.arrow, ...) is an Arrow IPC file with one row per token: prompt, prompt_id,
position, token, token_text, and one column per captured value. DIR/manifest.json lists the
shards and is rewritten after each one; run the same command again after an interruption
(Ctrl+C or a killed process) and it continues after the last shard.

Options:
  --prompts <file>           the JSONL corpus (required)
  --out <dir>                output folder (required; created when missing)
  --capture <names>          comma-separated, or repeated: ${CORPUS_CAPTURES.join(", ")}
                             (default: router)
  --shard-tokens <n>         tokens per shard (default: what fits in 256 MiB of captured values,
                             at most 65536); memory stays bounded by the shard size
  --overwrite                remove DIR's manifest and shards and start afresh
  --model <dir>              checkpoint folder (default: the embedded model)
  --backend <name>           compute backend (default: cpu)
  --emulator                 with --backend metal off macOS: run on the CPU emulator of the kernels
  --threads <n>              CPU threads (default: all cores)
  --precision <p>            fp32 (default), int24, int16 or int8 (docs/performance.md)
  -h, --help                 this help

To scale out, split the prompts file and run one trace per part (other processes or machines),
each into its own folder; the shards of all folders read as one dataset.
`;
}

export async function traceCommand(args: string[]): Promise<number> {
  const v = parseFlags(args, FLAGS, false).values;
  if (v.help) {
    process.stdout.write(traceHelpText());
    return 0;
  }
  if (v.prompts === undefined) throw new UsageError("trace needs --prompts FILE.jsonl");
  if (v.out === undefined) throw new UsageError("trace needs --out DIR");
  const capture = (v.capture ?? ["router"]).flatMap((c) => c.split(",")).map((c) => c.trim());
  for (const name of capture) {
    if (!(CORPUS_CAPTURES as readonly string[]).includes(name)) {
      throw new UsageError(`--capture ${name === "" ? "''" : name}: unknown (known: ${CORPUS_CAPTURES.join(", ")})`);
    }
  }
  const shardTokens = numberFlag("--shard-tokens", v["shard-tokens"], integerAtLeast(1));
  const model = await loadModel(modelFlags(v));

  const abort = new AbortController();
  const onSigint = () => abort.abort();
  process.once("SIGINT", onSigint);
  const bar = progressBar(process.stderr, `tracing ${path.basename(v.prompts)}`);
  const onProgress = (p: CorpusProgress) => {
    if (bar) bar.update(p.prompts, p.total);
    else if (p.shard) process.stderr.write(`${p.shard}: ${p.prompts}/${p.total} prompts, ${p.tokens} tokens\n`);
  };
  let result;
  try {
    result = await traceCorpus(model, { prompts: v.prompts, out: v.out, capture, shardTokens, overwrite: v.overwrite, onProgress, signal: abort.signal });
  } finally {
    process.off("SIGINT", onSigint);
    bar?.end();
    model.tokenizer?.close();
  }
  const m = result.manifest;
  const what = `${m.next.prompt}/${m.prompts.count} prompts, ${m.tokens} tokens in ${m.shards.length} shards in ${v.out}`;
  if (!result.complete) {
    process.stderr.write(`interrupted: ${what}; run the same command again to continue\n`);
    return 130;
  }
  process.stderr.write(`traced ${what}${result.resumed ? " (resumed)" : ""}\n`);
  return 0;
}
