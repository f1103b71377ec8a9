// Checks that llama.cpp computes the same model as moelens from a GGUF written by
// gguf-from-checkpoint.py: both run the same token ids (Lily's synthetic prompt), and this prints how
// close every position's logits are and whether the greedy continuations agree, as JSON.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { parseArgs } from "node:util";
import { load } from "../../sdk/index";
import { syntheticPrompt } from "../../bench/synthetic-prompt";

const HELP = `Usage: npx tsx scripts/peer/compare-with-llama.ts --model DIR --gguf FILE [options]

Options:
  --prompt N       prompt length (default 16)
  --decode N       greedy decode steps (default 16)
  --threads N      threads for both engines (default 2)
  --probe PATH     llama-probe binary (default ~/.cache/moelens/llama.cpp/build/bin/llama-probe)
  --help           this text`;

interface Closeness {
  maxAbsDiff: number;
  maxAbsLogit: number;
  top1Agree: number; // positions whose argmax agrees
  positions: number;
}

function compareRows(ours: Float32Array[], theirs: Float32Array[], vocab: number): Closeness {
  let maxAbsDiff = 0, maxAbsLogit = 0, top1Agree = 0;
  const argmax = (v: Float32Array) => v.reduce((best, x, i) => (x > v[best] ? i : best), 0);
  for (let r = 0; r < ours.length; r++) {
    for (let i = 0; i < vocab; i++) {
      maxAbsDiff = Math.max(maxAbsDiff, Math.abs(ours[r][i] - theirs[r][i]));
      maxAbsLogit = Math.max(maxAbsLogit, Math.abs(ours[r][i]));
    }
    if (argmax(ours[r]) === argmax(theirs[r])) top1Agree++;
  }
  return { maxAbsDiff, maxAbsLogit, top1Agree, positions: ours.length };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      model: { type: "string" },
      gguf: { type: "string" },
      prompt: { type: "string", default: "16" },
      decode: { type: "string", default: "16" },
      threads: { type: "string", default: "2" },
      probe: { type: "string", default: path.join(os.homedir(), ".cache/moelens/llama.cpp/build/bin/llama-probe") },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) return void console.log(HELP);
  if (!values.model || !values.gguf) throw new Error("--model DIR and --gguf FILE are required (see --help)");
  const promptLength = Number(values.prompt), steps = Number(values.decode), threads = Number(values.threads);

  const model = await load(values.model, { backend: "cpu", threads });
  const vocab = model.config.vocabSize;
  const ids = syntheticPrompt(promptLength, vocab);

  // Ours: all prompt positions, then greedy steps.
  const s = model.session();
  const prefill = await s.prefill(ids, { logits: "all" });
  const oursRows = Array.from({ length: promptLength }, (_, r) => prefill.logits.index(r).data.slice());
  const oursTokens: number[] = [];
  let token = prefill.logits.index(promptLength - 1).argmax();
  for (let i = 0; i < steps; i++) {
    oursTokens.push(token);
    const d = await s.decode(token);
    oursRows.push(d.logits.data.slice());
    token = d.logits.argmax();
  }

  // llama.cpp on the same ids.
  const logitsFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "moelens-peer-")), "logits.f32");
  const out = execFileSync(values.probe, [values.gguf, "--ids", ids.join(","), "--decode", String(steps), "--threads", String(threads), "--logits", logitsFile], { encoding: "utf8" });
  const probe = JSON.parse(out.trim().split("\n").pop()!) as { vocab: number; tokens: number[] };
  if (probe.vocab !== vocab) throw new Error(`${values.gguf}: llama.cpp vocab ${probe.vocab}, ours ${vocab}`);
  const raw = fs.readFileSync(logitsFile);
  const all = new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
  const theirsRows = Array.from({ length: all.length / vocab }, (_, r) => all.subarray(r * vocab, (r + 1) * vocab));

  // Decode rows are comparable only while both continuations agree.
  let agreeSteps = 0;
  while (agreeSteps < steps && oursTokens[agreeSteps] === probe.tokens[agreeSteps]) agreeSteps++;
  const compared = promptLength + agreeSteps;
  const result = {
    model: values.model, gguf: values.gguf, prompt: promptLength,
    prefill: compareRows(oursRows.slice(0, promptLength), theirsRows.slice(0, promptLength), vocab),
    decode: compareRows(oursRows.slice(promptLength, compared), theirsRows.slice(promptLength, compared), vocab),
    greedyAgreeSteps: agreeSteps, greedySteps: steps,
    oursTokens, llamaTokens: probe.tokens,
  };
  console.log(JSON.stringify(result, null, 2));
  model.dispose();
}

main().catch((e) => {
  console.error(`compare-with-llama: ${(e as Error).message}`);
  process.exit(1);
});
