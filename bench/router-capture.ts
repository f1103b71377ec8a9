// What router capture costs during decode: decode tok/s with capture off and on, in alternating
// rounds on one loaded model, median of rounds. Usage:
//   npx tsx bench/router-capture.ts [--model DIR] [--tokens N] [--rounds N] [--threads N] [--json FILE]
import * as fs from "node:fs";
import { parseArgs } from "node:util";
import { embeddedModelDir, load, type CaptureName, type Model } from "../sdk/index";

const HELP = `Usage: npx tsx bench/router-capture.ts [--model DIR] [--tokens N] [--rounds N] [--threads N] [--json FILE]
Measures decode tok/s without capture and with capture: ["router"] (default model: the embedded one).`;

interface Rate {
  wall: number; // tokens per wall-clock second
  cpu: number; // tokens per second of process CPU time (steadier on a shared machine)
}

async function decodeRate(model: Model, tokens: number, capture: CaptureName[]): Promise<Rate> {
  const s = model.session();
  const vocab = model.config.vocabSize;
  const prompt = Array.from({ length: 32 }, (_, i) => Number((BigInt(i) * 2654435761n) % 4294967296n) % vocab);
  let next = (await s.prefill(prompt)).logits.argmax();
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  for (let i = 0; i < tokens; i++) next = (await s.decode(next, { capture })).logits.argmax();
  const cpu = process.cpuUsage(c0);
  return {
    wall: tokens / (Number(process.hrtime.bigint() - t0) / 1e9),
    cpu: tokens / ((cpu.user + cpu.system) / 1e6),
  };
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
  const off: Rate[] = [];
  const on: Rate[] = [];
  for (let r = 0; r < rounds; r++) {
    off.push(await decodeRate(model, tokens, []));
    on.push(await decodeRate(model, tokens, ["router"]));
  }
  const result = {
    model: values.model,
    tokens,
    rounds,
    decode_tok_s_capture_off: median(off.map((r) => r.wall)),
    decode_tok_s_capture_router: median(on.map((r) => r.wall)),
    cost_percent: 100 * (1 - median(on.map((r) => r.wall)) / median(off.map((r) => r.wall))),
    cpu_time_cost_percent: 100 * (1 - median(on.map((r) => r.cpu)) / median(off.map((r) => r.cpu))),
    date: new Date().toISOString(),
  };
  console.log(JSON.stringify(result, null, 2));
  if (values.json) fs.writeFileSync(values.json, JSON.stringify(result, null, 2));
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
