// Writes a synthetic checkpoint with the exact mlx-community layout of Qwen3.6-35B-A3B 4-bit (random, seeded
// weights): `npx tsx scripts/synth-checkpoint.ts --out DIR [--preset NAME] [--seed N] [--force]`.
import * as fs from "node:fs";
import * as path from "node:path";
import { parseArgs } from "node:util";
import {
  DEFAULT_PRESET,
  GROUP_SIZE,
  PRESETS,
  WEIGHT_STD,
  configJson,
  generationConfigJson,
  getPreset,
  planShards,
  tensorInventory,
} from "./synth-inventory";
import { existingCheckpointFiles, writeSyntheticCheckpoint, type WriteProgress } from "./synth-writer";

const HELP = `Usage: npx tsx scripts/synth-checkpoint.ts --out DIR [options]

Writes a checkpoint with the tensor names, shapes, dtypes, sharding and config.json of the
mlx-community 4-bit Qwen3.6-35B-A3B (MLX affine 4-bit, group 64, 8-bit router and shared-expert
gate), filled with seeded random weights that keep the forward pass finite. The full preset is
about 19.5 GB; it is written streaming (bounded memory). Never put it inside a git checkout.

Options:
  --out DIR        output directory (created if missing)
  --preset NAME    ${Object.keys(PRESETS).join(" | ")} (default ${DEFAULT_PRESET})
  --seed N         random seed, a non-negative integer (default 0)
  --force          replace a checkpoint already in DIR
  --manifest FILE  write the plan instead (config files, shards, every tensor's name, dtype, shape and
                   value distribution) as JSON, for scripts/synth_checkpoint.py on machines without Node
  --help           this text`;

function formatBytes(n: number): string {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : `${(n / 1e6).toFixed(1)} MB`;
}

// A one-line bar on a TTY, redrawn at most every 200 ms.
function progressBar(start: number): (p: WriteProgress) => void {
  let last = 0;
  return (p) => {
    const now = Date.now();
    if (now - last < 200 && p.bytesDone < p.bytesTotal) return;
    last = now;
    const frac = p.bytesDone / p.bytesTotal;
    const width = 30;
    const filled = Math.round(frac * width);
    const rate = p.bytesDone / Math.max(1e-3, (now - start) / 1000);
    const eta = (p.bytesTotal - p.bytesDone) / Math.max(1, rate);
    process.stderr.write(
      `\r[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${(frac * 100).toFixed(1).padStart(5)}% ` +
        `${formatBytes(p.bytesDone)} / ${formatBytes(p.bytesTotal)}  ${formatBytes(rate)}/s  ` +
        `ETA ${Math.ceil(eta)}s  shard ${p.shard}/${p.shards} `,
    );
  };
}

function main(): void {
  const { values } = parseArgs({
    options: {
      out: { type: "string" },
      preset: { type: "string", default: DEFAULT_PRESET },
      seed: { type: "string", default: "0" },
      force: { type: "boolean", default: false },
      manifest: { type: "string" },
      help: { type: "boolean", default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(HELP);
    return;
  }
  if (values.manifest) {
    const preset = getPreset(values.preset!);
    const manifest = {
      preset: preset.name,
      groupSize: GROUP_SIZE,
      weightStd: WEIGHT_STD,
      config: configJson(preset),
      generationConfig: generationConfigJson(preset),
      shards: planShards(tensorInventory(preset), preset.shardBytes),
    };
    fs.writeFileSync(values.manifest, JSON.stringify(manifest));
    console.log(`${values.manifest}: ${manifest.shards.length} shard(s) of ${preset.name}`);
    return;
  }
  if (!values.out) throw new Error("--out DIR is required (see --help)");
  const seed = Number(values.seed);
  if (!Number.isSafeInteger(seed) || seed < 0) throw new Error(`--seed '${values.seed}' is not a non-negative integer`);
  const preset = getPreset(values.preset!);
  const dir = path.resolve(values.out);

  const total = planShards(tensorInventory(preset), preset.shardBytes).reduce((a, s) => a + s.bytes, 0);
  fs.mkdirSync(dir, { recursive: true });
  const old = existingCheckpointFiles(dir);
  if (old.length > 0 && !values.force) throw new Error(`${dir}: already holds a checkpoint (${old.join(", ")}); pass --force to replace it`);
  const stat = fs.statfsSync(dir);
  const reclaimed = old.reduce((a, f) => a + fs.statSync(path.join(dir, f)).size, 0);
  const free = Number(stat.bavail) * Number(stat.bsize) + reclaimed;
  if (free < total * 1.02) throw new Error(`${dir}: ${formatBytes(free)} free, the ${preset.name} checkpoint needs ${formatBytes(total)}`);

  const start = Date.now();
  const tty = process.stderr.isTTY;
  const result = writeSyntheticCheckpoint(dir, preset, {
    seed,
    replace: values.force,
    onProgress: tty ? progressBar(start) : undefined,
    onShard: (shard, k, n) => {
      if (!tty) console.error(`wrote ${shard.file} (${formatBytes(shard.bytes)}, ${shard.tensors.length} tensors) [${k + 1}/${n}]`);
    },
  });
  if (tty) process.stderr.write("\n");
  const seconds = (Date.now() - start) / 1000;
  console.log(
    `${dir}: ${preset.name}, seed ${seed}, ${result.shards.length} shard(s), ${formatBytes(result.totalBytes)} ` +
      `in ${seconds.toFixed(1)} s`,
  );
}

try {
  main();
} catch (e) {
  console.error(`synth-checkpoint: ${(e as Error).message}`);
  process.exit(1);
}
