// The llama.cpp peer: `llama-bench -p 512 -n 128 -t T` on a GGUF of the same weights (built and
// converted by scripts/peer/), parsed from its JSON output.
import { runMeasured } from "./run-measured";
import { median, stddev } from "./stats";

export interface LlamaTest {
  test: string; // "pp512" or "tg128"
  tokPerSec: number; // mean over repetitions, as llama-bench reports it (median of rounds' means: medianOfRounds)
  stddev: number;
  samples: number[];
}

export interface LlamaResult {
  binary: string;
  gguf: string;
  threads: number;
  repetitions: number; // per round
  rounds: number;
  buildCommit: string | null;
  modelType: string | null;
  modelBytes: number | null;
  prefill: LlamaTest;
  decode: LlamaTest;
  peakRssBytes: number | null;
  seconds: number;
}

interface BenchRow {
  n_prompt: number;
  n_gen: number;
  avg_ts: number;
  stddev_ts: number;
  samples_ts?: number[];
  build_commit?: string;
  model_type?: string;
  model_size?: number;
}

export async function runLlamaBench(binary: string, gguf: string, threads: number, repetitions: number): Promise<LlamaResult> {
  const args = ["-m", gguf, "-p", "512", "-n", "128", "-t", String(threads), "-r", String(repetitions), "-o", "json"];
  const run = await runMeasured(binary, args, { timeoutSeconds: 3600 });
  let rows: BenchRow[];
  try {
    rows = JSON.parse(run.stdout) as BenchRow[];
  } catch {
    throw new Error(`${binary}: output is not JSON:\n${run.stdout.slice(0, 500)}\n${run.stderr.slice(-1000)}`);
  }
  const pick = (name: string, row: BenchRow | undefined): LlamaTest => {
    if (!row) throw new Error(`${binary}: no ${name} row in its output`);
    return { test: name, tokPerSec: row.avg_ts, stddev: row.stddev_ts, samples: row.samples_ts ?? [] };
  };
  const pp = rows.find((r) => r.n_prompt === 512 && r.n_gen === 0);
  const tg = rows.find((r) => r.n_prompt === 0 && r.n_gen === 128);
  return {
    binary, gguf, threads, repetitions, rounds: 1,
    buildCommit: pp?.build_commit ?? null,
    modelType: pp?.model_type ?? null,
    modelBytes: pp?.model_size ?? null,
    prefill: pick("pp512", pp),
    decode: pick("tg128", tg),
    peakRssBytes: run.peakRssBytes,
    seconds: run.seconds,
  };
}

// Several rounds of llama-bench as one result: per test, the median of the rounds' means, and the
// standard deviation over every repetition of every round.
export function medianOfRounds(rounds: LlamaResult[]): LlamaResult {
  const test = (pick: (r: LlamaResult) => LlamaTest): LlamaTest => {
    const samples = rounds.flatMap((r) => pick(r).samples);
    return {
      test: pick(rounds[0]).test,
      tokPerSec: median(rounds.map((r) => pick(r).tokPerSec)),
      stddev: samples.length > 1 ? stddev(samples) : pick(rounds[0]).stddev,
      samples,
    };
  };
  const rss = rounds.map((r) => r.peakRssBytes).filter((b): b is number => b !== null);
  return {
    ...rounds[0],
    rounds: rounds.length,
    prefill: test((r) => r.prefill),
    decode: test((r) => r.decode),
    peakRssBytes: rss.length ? Math.max(...rss) : null,
    seconds: rounds.reduce((a, r) => a + r.seconds, 0),
  };
}
