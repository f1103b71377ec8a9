// What router capture costs during decode: decode tok/s with capture off and on, in alternating
// rounds on one loaded model, median of rounds. Usage:
//   npx tsx bench/router-capture.ts [--model DIR] [--tokens N] [--rounds N] [--threads N] [--json FILE]
import * as fs from "node:fs";
import { parseArgs } from "node:util";
import { embeddedModelDir, load, type CaptureName, type Model } from "../sdk/index";
import { median } from "./stats";

const HELP = `Usage: npx tsx bench/router-capture.ts [--model DIR] [--tokens N] [--rounds N] [--threads N] [--json FILE]
Measures decode tok/s without capture and with capture: ["router"], alternating token by token in one
session (default model: the embedded one); the cost is the median over rounds.`;

// Alternates capture off and on token by token in one session, so both see the same machine state
// (a shared machine drifts between separate runs); returns tokens per second of each.
async function interleavedRates(model: Model, tokens: number): Promise<{ off: number; on: number }> {
  const s = model.session();
  const vocab = model.config.vocabSize;
  const prompt = Array.from({ length: 32 }, (_, i) => Number((BigInt(i) * 2654435761n) % 4294967296n) % vocab);
  let next = (await s.prefill(prompt)).logits.argmax();
  const spent = { off: 0, on: 0 };
  for (let i = 0; i < 2 * tokens; i++) {
    const mode = i % 2 === 0 ? "off" : "on";
    const capture: CaptureName[] = mode === "on" ? ["router"] : [];
    const t0 = process.hrtime.bigint();
    next = (await s.decode(next, { capture })).logits.argmax();
    spent[mode] += Number(process.hrtime.bigint() - t0) / 1e9;
  }
  return { off: tokens / spent.off, on: tokens / spent.on };
}


async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      model: { type: "string", default: embeddedModelDir },
      tokens: { type: "string", default: "128" },
      rounds: { type: "string", default: "5" },
      threads: { type: "string", default: "0" },
      json: { type: "string" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) return console.log(HELP);
  const tokens = Number(values.tokens);
  const rounds = Number(values.rounds);
  const model = await load(values.model!, { threads: Number(values.threads) });
  await interleavedRates(model, 16); // warm-up
  const off: number[] = [];
  const on: number[] = [];
  const costs: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const rate = await interleavedRates(model, tokens);
    off.push(rate.off);
    on.push(rate.on);
    costs.push(100 * (1 - rate.on / rate.off));
  }
  const result = {
    model: values.model,
    tokens,
    rounds,
    decode_tok_s_capture_off: median(off),
    decode_tok_s_capture_router: median(on),
    cost_percent: median(costs),
    date: new Date().toISOString(),
  };
  console.log(JSON.stringify(result, null, 2));
  if (values.json) fs.writeFileSync(values.json, JSON.stringify(result, null, 2));
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
