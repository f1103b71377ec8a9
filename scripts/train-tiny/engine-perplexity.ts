// Our engine's perplexity on the held-out token file, against the transformers figure recorded in it
// for the same checkpoint layout. Exits 1 when they differ by more than 0.5 %.
//
//   npx tsx scripts/train-tiny/engine-perplexity.ts [MODEL_DIR] [--heldout FILE] [--json OUT]
import * as fs from "node:fs";
import * as path from "node:path";
import { load } from "../../sdk";
import { evaluateHeldout, readHeldout, type Layout } from "./heldout-eval";

const HELP = `usage: npx tsx scripts/train-tiny/engine-perplexity.ts [MODEL_DIR] [--heldout FILE] [--json OUT]

MODEL_DIR   a moelens-tiny export (default: the embedded model, models/moelens-tiny); the layout
            (MLX 4-bit or HF bf16) is read from its config.json
--heldout   held-out token file (default: test/data/heldout-tiny.json)
--json      also write the figures as JSON to OUT`;

const TOLERANCE = 0.005;

async function main(): Promise<void> {
  const root = path.resolve(__dirname, "..", "..");
  let dir = path.join(root, "models", "moelens-tiny");
  let heldoutFile = path.join(root, "test", "data", "heldout-tiny.json");
  let jsonOut: string | undefined;
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--help" || a === "-h") {
      console.log(HELP);
      return;
    } else if (a === "--heldout" && i + 1 < argv.length) heldoutFile = argv[++i];
    else if (a === "--json" && i + 1 < argv.length) jsonOut = argv[++i];
    else if (!a.startsWith("-")) dir = a;
    else {
      console.error(`engine-perplexity: unknown argument '${a}'\n\n${HELP}`);
      process.exit(2);
    }
  }
  const config = JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8"));
  const layout: Layout = config.quantization ? "mlx_dequant_fp32" : "hf_bf16";
  const heldout = readHeldout(heldoutFile);
  const t0 = Date.now();
  const model = await load(dir);
  const r = await evaluateHeldout(model, heldout.segments);
  const ref = heldout.transformers[layout].ppl;
  const rel = r.ppl / ref - 1;
  const perDomain = Object.entries(r.perDomain).map(([d, v]) => `${d} ${v.ppl.toFixed(3)}`).join(", ");
  console.log(`${dir} (${layout}): engine ppl ${r.ppl.toFixed(4)} over ${r.tokens} tokens (${perDomain}) in ${Date.now() - t0} ms`);
  console.log(`transformers ppl ${ref.toFixed(4)}: difference ${(100 * rel).toFixed(3)} % (tolerance ${100 * TOLERANCE} %)`);
  if (jsonOut) {
    fs.writeFileSync(jsonOut, JSON.stringify({ dir, layout, ppl: r.ppl, tokens: r.tokens, perDomain: r.perDomain, transformers: ref, relative: rel }, null, 1) + "\n");
  }
  if (Math.abs(rel) > TOLERANCE) process.exit(1);
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
