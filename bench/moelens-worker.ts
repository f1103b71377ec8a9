// One measurement of moelens in a fresh process (spawned by bench/cpu-bench.ts): load, an exact-shape
// warm-up (same prompt length, a few decode steps), then one timed prefill of the synthetic prompt and
// timed greedy decode steps. Prints one JSON line.
// `npx tsx bench/moelens-worker.ts --model DIR --prompt N --decode N --threads N [--precision fp32|int24|int16|int8]`
import { parseArgs } from "node:util";
import { load, precisions, type Precision } from "../sdk/index";
import { syntheticPrompt } from "./synthetic-prompt";

export interface WorkerResult {
  precision: Precision;
  prompt: number;
  decode: number;
  threads: number;
  loadSeconds: number;
  warmupSeconds: number;
  prefillTokPerSec: number;
  decodeTokPerSec: number;
  tokens: number[];
  peakRssBytes: number;
}

const WARMUP_DECODE_STEPS = 4;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      model: { type: "string" },
      prompt: { type: "string", default: "512" },
      decode: { type: "string", default: "64" },
      threads: { type: "string", default: "0" },
      precision: { type: "string", default: "fp32" },
    },
  });
  if (!values.model) throw new Error("moelens-worker: --model DIR is required");
  const prompt = Number(values.prompt), decode = Number(values.decode), threads = Number(values.threads);
  for (const [k, v] of [["prompt", prompt], ["decode", decode], ["threads", threads]] as const) {
    if (!Number.isSafeInteger(v) || v < (k === "prompt" ? 1 : 0)) throw new Error(`moelens-worker: --${k} must be a non-negative integer`);
  }

  const precision = values.precision as WorkerResult["precision"];
  if (!precisions.includes(precision)) throw new Error(`moelens-worker: --precision must be one of ${precisions.join(", ")}`);

  let t = performance.now();
  const model = await load(values.model, { backend: "cpu", threads, precision });
  if (model.info.precision !== precision) throw new Error(`moelens-worker: loaded with precision ${model.info.precision}, not ${precision}`);
  const loadSeconds = (performance.now() - t) / 1000;
  const ids = syntheticPrompt(prompt, model.config.vocabSize);
  const s = model.session();

  t = performance.now();
  let token = (await s.prefill(ids)).logits.argmax();
  for (let i = 0; i < Math.min(WARMUP_DECODE_STEPS, decode); i++) token = (await s.decode(token)).logits.argmax();
  const warmupSeconds = (performance.now() - t) / 1000;
  s.reset();

  t = performance.now();
  token = (await s.prefill(ids)).logits.argmax();
  const prefillSeconds = (performance.now() - t) / 1000;
  const tokens: number[] = [];
  t = performance.now();
  for (let i = 0; i < decode; i++) {
    tokens.push(token);
    token = (await s.decode(token)).logits.argmax();
  }
  const decodeSeconds = (performance.now() - t) / 1000;

  const result: WorkerResult = {
    precision, prompt, decode, threads, loadSeconds, warmupSeconds,
    prefillTokPerSec: prompt / prefillSeconds,
    decodeTokPerSec: decode > 0 ? decode / decodeSeconds : 0,
    tokens,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
  };
  console.log(JSON.stringify(result));
  model.dispose();
}

main().catch((e) => {
  console.error(`moelens-worker: ${(e as Error).message}`);
  process.exit(1);
});
