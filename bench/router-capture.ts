// What router capture costs during decode: decode tok/s with capture off and on, in alternating
// rounds on one loaded model, median of rounds. Usage:
//   npx tsx bench/router-capture.ts [--model DIR] [--tokens N] [--rounds N] [--threads N] [--json FILE]
import * as fs from "node:fs";
import { parseArgs } from "node:util";
import { embeddedModelDir, load, type CaptureName, type Model } from "../sdk/index";

const HELP = `Usage: npx tsx bench/router-capture.ts [--model DIR] [--tokens N] [--rounds N] [--threads N] [--json FILE]
Measures decode tok/s without capture and with capture: ["router"] (default model: the embedded one).`;

async function decodeRate(model: Model, tokens: number, capture: CaptureName[]): Promise<number> {
  const s = model.session();
  const vocab = model.config.vocabSize;
  const prompt = Array.from({ length: 32 }, (_, i) => Number((BigInt(i) * 2654435761n) % 4294967296n) % vocab);
  let next = (await s.prefill(prompt)).logits.argmax();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < tokens; i++) next = (await s.decode(next, { capture })).logits.argmax();
  return tokens / (Number(process.hrtime.bigint() - t0) / 1e9);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

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
  await decodeRate(model, 16, []); // warm-up
  const off: number[] = [];
  const on: number[] = [];
  for (let r = 0; r < rounds; r++) {
    off.push(await decodeRate(model, tokens, []));
    on.push(await decodeRate(model, tokens, ["router"]));
  }
  const result = {
    model: values.model,
    tokens,
    rounds,
    decode_tok_s_capture_off: median(off),
    decode_tok_s_capture_router: median(on),
    cost_percent: 100 * (1 - median(on) / median(off)),
    date: new Date().toISOString(),
  };
  console.log(JSON.stringify(result, null, 2));
  if (values.json) fs.writeFileSync(values.json, JSON.stringify(result, null, 2));
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
