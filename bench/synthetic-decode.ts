// Loads a checkpoint (e.g. the synthetic full-size one from scripts/synth-checkpoint.ts) on the CPU backend
// and reports, as JSON: load time, resident memory, prefill and decode speed, and the thread count.
// `npx tsx bench/synthetic-decode.ts DIR [--tokens N] [--prompt N] [--threads N]`
import * as fs from "node:fs";
import * as os from "node:os";
import { parseArgs } from "node:util";
import { load } from "../sdk/index";

const HELP = `Usage: npx tsx bench/synthetic-decode.ts DIR [options]

Loads DIR with the CPU backend, prefills a short prompt twice (the first run also faults the
mmapped weights in), then decodes greedily, and prints one JSON object with the figures.

Options:
  --tokens N    tokens to decode (default 16)
  --prompt N    prompt length in tokens (default 8)
  --threads N   CPU threads (default 0: all cores)
  --help        this text`;

const gib = (bytes: number) => Number((bytes / 2 ** 30).toFixed(2));

// Resident memory split into anonymous (heap, caches, state) and file-backed (mmapped weights) pages;
// only Linux says, elsewhere just the total.
function residentGiB() {
  const out: Record<string, number> = { total: gib(process.memoryUsage().rss) };
  if (fs.existsSync("/proc/self/status")) {
    for (const m of fs.readFileSync("/proc/self/status", "utf8").matchAll(/^Rss(Anon|File):\s+(\d+) kB/gm)) {
      out[m[1].toLowerCase()] = gib(Number(m[2]) * 1024);
    }
  }
  return out;
}

function positiveInt(name: string, text: string, min: number): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < min) throw new Error(`--${name} '${text}' must be an integer >= ${min}`);
  return n;
}

function nonFinite(values: Float32Array): number {
  let bad = 0;
  for (const v of values) if (!Number.isFinite(v)) bad++;
  return bad;
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      tokens: { type: "string", default: "16" },
      prompt: { type: "string", default: "8" },
      threads: { type: "string", default: "0" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    return;
  }
  if (positionals.length !== 1) throw new Error("expected one checkpoint directory (see --help)");
  const tokens = positiveInt("tokens", values.tokens!, 1);
  const promptLength = positiveInt("prompt", values.prompt!, 1);
  const threads = positiveInt("threads", values.threads!, 0);

  const loadAverageBefore = os.loadavg()[0];
  const t0 = performance.now();
  const model = await load(positionals[0], { backend: "cpu", threads });
  const loadSeconds = (performance.now() - t0) / 1000;
  const rssAfterLoad = residentGiB();

  // A fixed prompt of ordinary ids (spread over the vocabulary, below the special tokens).
  const vocab = model.config.vocabSize;
  const prompt = Array.from({ length: promptLength }, (_, i) => (7919 * (i + 1)) % Math.min(vocab, 150000));

  const prefill = async () => {
    const s = model.session();
    const t = performance.now();
    const r = await s.prefill(prompt);
    return { session: s, seconds: (performance.now() - t) / 1000, logits: r.logits };
  };
  const cold = await prefill();
  const warm = await prefill();

  const s = warm.session;
  let token = warm.logits.argmax();
  let badLogits = nonFinite(warm.logits.data) + nonFinite(cold.logits.data);
  const generated: number[] = [];
  const stepSeconds: number[] = [];
  const cpuBefore = process.cpuUsage();
  for (let i = 0; i < tokens; i++) {
    const t = performance.now();
    const d = await s.decode(token);
    stepSeconds.push((performance.now() - t) / 1000);
    badLogits += nonFinite(d.logits.data);
    token = d.logits.argmax();
    generated.push(token);
  }
  // CPU time (all threads) per token: unlike wall time, it hardly depends on other processes' load.
  const cpu = process.cpuUsage(cpuBefore);
  const decodeCpuSeconds = (cpu.user + cpu.system) / 1e6;
  const decodeSeconds = stepSeconds.reduce((a, b) => a + b, 0);
  const sorted = [...stepSeconds].sort((a, b) => a - b);

  console.log(
    JSON.stringify(
      {
        dir: model.dir,
        layout: model.info.layout,
        weightBytes: model.info.weightBytes,
        threads: threads || os.availableParallelism(),
        cores: os.availableParallelism(),
        machineMemoryGiB: gib(os.totalmem()),
        loadAverage1m: [Number(loadAverageBefore.toFixed(2)), Number(os.loadavg()[0].toFixed(2))],
        loadSeconds: Number(loadSeconds.toFixed(2)),
        rssAfterLoadGiB: rssAfterLoad,
        rssAfterDecodeGiB: residentGiB(),
        peakRssGiB: gib(process.resourceUsage().maxRSS * 1024),
        promptTokens: promptLength,
        prefillColdTokPerSec: Number((promptLength / cold.seconds).toFixed(2)),
        prefillTokPerSec: Number((promptLength / warm.seconds).toFixed(2)),
        decodeTokens: tokens,
        decodeTokPerSec: Number((tokens / decodeSeconds).toFixed(2)),
        decodeMedianMsPerToken: Number((1000 * sorted[Math.floor(sorted.length / 2)]).toFixed(1)),
        decodeFirstMsPerToken: Number((1000 * stepSeconds[0]).toFixed(1)),
        decodeCpuMsPerToken: Number(((1000 * decodeCpuSeconds) / tokens).toFixed(1)),
        nonFiniteLogits: badLogits,
        generated,
      },
      null,
      2,
    ),
  );
}

main().catch((e: Error) => {
  console.error(`synthetic-decode: ${e.message}`);
  process.exit(1);
});
