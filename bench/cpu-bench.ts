// The CPU benchmark: moelens (through the SDK, the configuration the parity tests check)
// and, with --gguf, llama.cpp's llama-bench on the same weights, in one run on one machine, with the
// machine's read bandwidth measured in the same run. See docs/performance.md.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parseArgs } from "node:util";
import type { BenchResult, MoelensRow } from "./bench-result";
import { decodeBytesPerToken, decodeShape, decodeTraffic, mlxBitsPerWeight } from "./decode-traffic";
import { medianOfRounds, runLlamaBench, type LlamaResult } from "./llama-peer";
import type { WorkerResult } from "./moelens-worker";
import { precisions as precisionNames, type Precision } from "../sdk/model";
import { pageIn } from "./page-in";
import { peerRatios } from "./peer-ratios";
import { measureReadBandwidth } from "./read-bandwidth";
import { renderMarkdown, replaceDocSection } from "./report-markdown";
import { runMeasured } from "./run-measured";
import { median, spread } from "./stats";

const HELP = `Usage: npx tsx bench/cpu-bench.ts --model DIR [options]

Measures moelens on the CPU (fresh process per prompt length and round, exact-shape warm-up, one timed
prefill of the synthetic prompt, greedy decode steps, median of rounds), the machine's read bandwidth
(2-thread stream read, before and after), decode's fraction of that bandwidth (bytes per token from
config.json), and with --gguf llama.cpp's llama-bench pp512/tg128 on the same weights, with ratios.
Before each engine's runs its weight files are read into the page cache (evicted and read again the first
time, in huge-page folios: bench/page-in.c), so that neither engine reads from disk what the other's runs
evicted.

Options:
  --model DIR          checkpoint folder (e.g. one written by scripts/synth-checkpoint.ts)
  --gguf FILE          the same weights as GGUF (scripts/peer/gguf-from-checkpoint.py) to run llama-bench on
  --llama-bench PATH   llama-bench binary (default ~/.cache/moelens/llama.cpp/build/bin/llama-bench)
  --llama-reps N       llama-bench repetitions per round (default 3)
  --prompts LIST       prompt lengths, comma-separated (default 128,512)
  --decode N           decode steps per measurement (default 64)
  --rounds N           rounds, each running every moelens row and then llama-bench; the median of
                       the rounds counts, for each engine (default 2)
  --threads N          threads for both engines (default 2)
  --precision LIST     moelens CPU precisions, comma-separated, each with its own labelled rows:
                       fp32 (exact: the configuration the parity tests check; default), int24
                       (integer activations in decode, checked by the same parity tests), int16, int8
                       (reduced precision: integer activations, docs/performance.md)
  --json OUT           write the full results as JSON
  --markdown OUT       write the Markdown table
  --doc FILE           replace the table between the cpu-bench markers in FILE
  --help               this text`;

const DRIFT_LIMIT = 0.03; // rows that drift more than 3 % between rounds are flagged, as Lily's method does

function intList(name: string, text: string): number[] {
  const list = text.split(",").map((s) => Number(s.trim()));
  if (!list.length || list.some((n) => !Number.isSafeInteger(n) || n < 1)) throw new Error(`--${name} '${text}' must be positive integers, comma-separated`);
  return list;
}

function positiveInt(name: string, text: string): number {
  return intList(name, text)[0];
}


function machine(): BenchResult["machine"] {
  const cpuinfo = fs.existsSync("/proc/cpuinfo") ? fs.readFileSync("/proc/cpuinfo", "utf8") : "";
  const flags = new Set((/^flags\s*:(.*)$/m.exec(cpuinfo)?.[1] ?? "").trim().split(/\s+/));
  const isa = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "asimd", "sve"].filter((f) => flags.has(f));
  return {
    cpu: os.cpus()[0]?.model ?? "unknown",
    cores: os.cpus().length,
    memoryGiB: Number((os.totalmem() / 2 ** 30).toFixed(1)),
    kernel: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    isa,
  };
}

function gitCommit(): string | null {
  try {
    return execFileSync("git", ["describe", "--always", "--dirty"], { cwd: path.join(__dirname, ".."), encoding: "utf8" }).trim();
  } catch {
    return null;
  }
}

function weightFiles(dir: string): string[] {
  return fs.readdirSync(dir).filter((f) => f.endsWith(".safetensors")).map((f) => path.join(dir, f));
}

function weightBytes(dir: string): number {
  return weightFiles(dir).reduce((sum, f) => sum + fs.statSync(f).size, 0);
}

const pagedIn = new Set<string>();
// The first time in a run, the files are evicted and read again, so that every engine's weights sit in
// the same kind of page-cache folios whatever read them before the run.
function warmPageCache(what: string, files: string[]): void {
  const first = !pagedIn.has(files.join("\n"));
  pagedIn.add(files.join("\n"));
  const p = pageIn(files, first);
  log(`  ${what}: ${(p.bytes / 1e9).toFixed(2)} GB read into the page cache in ${p.seconds.toFixed(1)} s`);
}

async function runWorker(model: string, prompt: number, decode: number, threads: number, precision: Precision): Promise<WorkerResult> {
  const worker = path.join(__dirname, "moelens-worker.ts");
  const args = ["--import", "tsx", worker, "--model", model, "--prompt", String(prompt), "--decode", String(decode), "--threads", String(threads),
    "--precision", precision];
  // From the repository root, where `--import tsx` resolves.
  const run = await runMeasured(process.execPath, args, { timeoutSeconds: 3600, cwd: path.join(__dirname, "..") });
  const line = run.stdout.trim().split("\n").pop() ?? "";
  try {
    return JSON.parse(line) as WorkerResult;
  } catch {
    throw new Error(`moelens-worker printed no JSON result:\n${run.stdout.slice(-500)}\n${run.stderr.slice(-1000)}`);
  }
}

const log = (message: string) => process.stderr.write(`[cpu-bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      model: { type: "string" },
      gguf: { type: "string" },
      "llama-bench": { type: "string", default: path.join(os.homedir(), ".cache/moelens/llama.cpp/build/bin/llama-bench") },
      "llama-reps": { type: "string", default: "3" },
      prompts: { type: "string", default: "128,512" },
      decode: { type: "string", default: "64" },
      rounds: { type: "string", default: "2" },
      threads: { type: "string", default: "2" },
      precision: { type: "string", default: "fp32" },
      json: { type: "string" },
      markdown: { type: "string" },
      doc: { type: "string" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    return;
  }
  if (!values.model) throw new Error("--model DIR is required (see --help)");
  const model = path.resolve(values.model);
  const configPath = path.join(model, "config.json");
  if (!fs.existsSync(configPath)) throw new Error(`${configPath}: missing`);
  if (values.gguf && !fs.existsSync(values.gguf)) throw new Error(`--gguf ${values.gguf}: no such file`);
  if (values.gguf && !fs.existsSync(values["llama-bench"]!)) {
    throw new Error(`--llama-bench ${values["llama-bench"]}: no such file (build it with scripts/peer/build-llama-cpp.sh)`);
  }
  const prompts = intList("prompts", values.prompts!);
  const decode = positiveInt("decode", values.decode!);
  const rounds = positiveInt("rounds", values.rounds!);
  const threads = positiveInt("threads", values.threads!);
  const llamaReps = positiveInt("llama-reps", values["llama-reps"]!);
  const precisions = values.precision!.split(",").map((p) => p.trim());
  for (const p of precisions) {
    if (!(precisionNames as readonly string[]).includes(p)) throw new Error(`--precision '${values.precision}': each must be one of ${precisionNames.join(", ")}`);
  }

  const config = JSON.parse(fs.readFileSync(configPath, "utf8")) as Record<string, unknown>;
  const traffic = decodeTraffic(decodeShape(config, configPath), mlxBitsPerWeight(config));
  // Decode steps run at contexts prompt .. prompt + decode - 1: count the mean context's K/V.
  const bytesAt = (prompt: number, steps: number) => decodeBytesPerToken(traffic, prompt + (steps - 1) / 2);

  const loadStart = os.loadavg()[0];
  log(`read bandwidth, ${threads} threads`);
  const before = measureReadBandwidth(threads);
  log(`  ${before.best_gb_s.toFixed(2)} GB/s`);

  // Round by round, both engines: this host's speed drifts by up to 20 % within minutes, so each
  // engine's median comes from rounds spread over the whole run, not from one block of it.
  const runs = (precisions as Precision[]).flatMap((precision) => prompts.map((prompt) => ({ precision, prompt })));
  const results = runs.map(() => [] as WorkerResult[]);
  const llamaRounds: LlamaResult[] = [];
  for (let r = 0; r < rounds; r++) {
    warmPageCache("moelens checkpoint", weightFiles(model));
    for (const [i, { precision, prompt }] of runs.entries()) {
      log(`moelens ${precision} prompt ${prompt}, round ${r + 1}/${rounds}`);
      const w = await runWorker(model, prompt, decode, threads, precision);
      log(`  prefill ${w.prefillTokPerSec.toFixed(2)} tok/s, decode ${w.decodeTokPerSec.toFixed(3)} tok/s`);
      results[i].push(w);
    }
    if (values.gguf) {
      warmPageCache("GGUF", [path.resolve(values.gguf)]);
      log(`llama-bench -p 512 -n 128 -t ${threads} -r ${llamaReps} on ${values.gguf}, round ${r + 1}/${rounds}`);
      const l = await runLlamaBench(values["llama-bench"]!, path.resolve(values.gguf), threads, llamaReps);
      log(`  pp512 ${l.prefill.tokPerSec.toFixed(2)} tok/s, tg128 ${l.decode.tokPerSec.toFixed(3)} tok/s`);
      llamaRounds.push(l);
    }
  }

  const rows: MoelensRow[] = runs.map(({ precision, prompt }, i) => {
    const mine = results[i];
    const digest = mine[0].tokens.join(",");
    return {
      precision, prompt, rounds: mine,
      prefillTokPerSec: median(mine.map((w) => w.prefillTokPerSec)),
      decodeTokPerSec: median(mine.map((w) => w.decodeTokPerSec)),
      drift: Math.max(spread(mine.map((w) => w.prefillTokPerSec)), spread(mine.map((w) => w.decodeTokPerSec))),
      tokensAgree: mine.every((w) => w.tokens.join(",") === digest),
      peakRssBytes: Math.max(...mine.map((w) => w.peakRssBytes)),
      decodeBytesPerToken: bytesAt(prompt, decode),
      decodeBandwidthFraction: 0, // set once the bandwidth after the runs is known
    };
  });
  const llama: BenchResult["llama"] = llamaRounds.length
    ? { ...medianOfRounds(llamaRounds), decodeBytesPerToken: bytesAt(0, 128), decodeBandwidthFraction: 0 }
    : null;

  log("read bandwidth again");
  const after = measureReadBandwidth(threads);
  log(`  ${after.best_gb_s.toFixed(2)} GB/s`);
  const gbPerSec = Math.max(before.best_gb_s, after.best_gb_s);
  for (const row of rows) row.decodeBandwidthFraction = (row.decodeTokPerSec * row.decodeBytesPerToken) / (gbPerSec * 1e9);
  if (llama) llama.decodeBandwidthFraction = (llama.decode.tokPerSec * llama.decodeBytesPerToken) / (gbPerSec * 1e9);

  const ratios = llama ? peerRatios(rows, precisions as Precision[], llama, llamaRounds) : null;

  const result: BenchResult = {
    date: new Date().toISOString(),
    command: ["npx tsx bench/cpu-bench.ts", ...process.argv.slice(2)].join(" "),
    machine: machine(),
    loadAverage: { start: loadStart, end: os.loadavg()[0] },
    moelensCommit: gitCommit(),
    model: { dir: model, weightBytes: weightBytes(model) },
    threads, decodeSteps: decode,
    bandwidth: { before, after, gbPerSec },
    traffic,
    decodeBytesPerTokenZeroContext: decodeBytesPerToken(traffic),
    moelens: rows, llama, ratios,
  };
  for (const row of rows) {
    if (row.drift > DRIFT_LIMIT) log(`warning: ${row.precision} prompt ${row.prompt} drifts ${(row.drift * 100).toFixed(1)} % between rounds (limit 3 %)`);
    if (!row.tokensAgree) log(`warning: ${row.precision} prompt ${row.prompt}: rounds decoded different tokens`);
  }
  const markdown = renderMarkdown(result);
  if (values.json) fs.writeFileSync(values.json, JSON.stringify(result, null, 2) + "\n");
  if (values.markdown) fs.writeFileSync(values.markdown, markdown);
  if (values.doc) fs.writeFileSync(values.doc, replaceDocSection(fs.readFileSync(values.doc, "utf8"), markdown, values.doc));
  console.log(markdown);
}

main().catch((e) => {
  console.error(`cpu-bench: ${(e as Error).message}`);
  process.exit(1);
});
