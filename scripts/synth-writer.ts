// Writes a synthetic checkpoint from the inventory (scripts/synth-inventory.ts), streaming: each tensor is
// generated and written in slices of at most CHUNK_BYTES, so memory stays bounded whatever the model size.
// Values come from AES-128-CTR keystreams keyed by (seed, tensor or module name): fast, reproducible,
// and independent of the order or the sharding the tensors are written in.
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import {
  WEIGHT_STD,
  configJson,
  generationConfigJson,
  planShards,
  tensorBytes,
  tensorInventory,
  type Fill,
  type Shard,
  type SynthPreset,
  type TensorSpec,
} from "./synth-inventory";

const CHUNK_BYTES = 8 << 20;

export interface WriteProgress {
  bytesDone: number;
  bytesTotal: number;
  shard: number;
  shards: number;
}

export interface WriteOptions {
  seed?: number;
  /** Called after every slice written. */
  onProgress?: (p: WriteProgress) => void;
  /** Called when a shard file is complete. */
  onShard?: (shard: Shard, index: number, count: number) => void;
  /** Replace the checkpoint files already in `dir` (otherwise their presence is an error). */
  replace?: boolean;
}

export interface WriteResult {
  shards: Shard[];
  totalBytes: number;
}

class RandomStream {
  private readonly cipher: crypto.Cipher;
  private static zeros = Buffer.alloc(CHUNK_BYTES);

  constructor(seed: number, name: string) {
    const digest = crypto.createHash("sha256").update(`moelens-synth\0${seed}\0${name}`).digest();
    this.cipher = crypto.createCipheriv("aes-128-ctr", digest.subarray(0, 16), digest.subarray(16, 32));
  }

  bytes(n: number): Buffer {
    if (n > CHUNK_BYTES) throw new RangeError(`RandomStream: ${n} bytes asked at once (at most ${CHUNK_BYTES})`);
    return this.cipher.update(RandomStream.zeros.subarray(0, n));
  }
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Rounds to the nearest bfloat16 (ties to even); returns its bits. */
export function toBf16(x: number): number {
  f32[0] = x;
  const b = u32[0];
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

export function fromBf16(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0];
}

/** Scale magnitude that gives dequantized weights std WEIGHT_STD with uniform codes 0..2^bits-1. */
function baseScale(bits: number): number {
  const levels = 2 ** bits;
  return WEIGHT_STD / Math.sqrt((levels * levels - 1) / 12);
}

// Per-group scale from two random bytes: a random sign (MLX scales can be negative) and 0.75..1.25 jitter.
function groupScale(lo: number, hi: number, bits: number): number {
  const u = (lo | (hi << 8)) / 65536;
  const sign = u < 0.5 ? -1 : 1;
  const jitter = 0.75 + 0.5 * ((u * 2) % 1);
  return sign * jitter * baseScale(bits);
}

// Produces the bytes of one tensor slice by slice, consuming its random stream in order.
function* tensorSlices(t: TensorSpec, seed: number): Generator<Uint8Array> {
  const total = tensorBytes(t);
  const fill: Fill = t.fill;
  if (fill.kind === "codes") {
    const rng = new RandomStream(seed, t.name);
    for (let done = 0; done < total; done += CHUNK_BYTES) yield rng.bytes(Math.min(CHUNK_BYTES, total - done));
    return;
  }
  // BF16 tensors: CHUNK_BYTES / 2 elements per slice.
  const count = total / 2;
  const per = CHUNK_BYTES / 2;
  const rng =
    fill.kind === "scales" || fill.kind === "biases"
      ? new RandomStream(seed, `${fill.module}.scales`)
      : new RandomStream(seed, t.name);
  for (let start = 0; start < count; start += per) {
    const n = Math.min(per, count - start);
    const out = new Uint16Array(n);
    if (fill.kind === "scales" || fill.kind === "biases") {
      const r = rng.bytes(2 * n);
      const centre = (2 ** fill.bits - 1) / 2;
      for (let i = 0; i < n; i++) {
        const s = fromBf16(toBf16(groupScale(r[2 * i], r[2 * i + 1], fill.bits)));
        out[i] = toBf16(fill.kind === "scales" ? s : -s * centre);
      }
    } else {
      const r = rng.bytes(4 * n);
      for (let i = 0; i < n; i++) {
        const u = r.readUInt32LE(4 * i) / 4294967296;
        const x = fill.low + (fill.high - fill.low) * u;
        out[i] = toBf16(fill.kind === "log-uniform" ? Math.log(x) : x);
      }
    }
    yield new Uint8Array(out.buffer);
  }
}

/** The safetensors header (length prefix + JSON padded with spaces to 8 bytes), MLX metadata. */
export function safetensorsHeader(tensors: TensorSpec[]): Buffer {
  const header: Record<string, unknown> = { __metadata__: { format: "mlx" } };
  let offset = 0;
  for (const t of tensors) {
    const b = tensorBytes(t);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + b] };
    offset += b;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const body = Buffer.from(json, "utf8");
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(body.length));
  return Buffer.concat([prefix, body]);
}

function writeAll(fd: number, data: Uint8Array, file: string): void {
  for (let off = 0; off < data.length; ) {
    const n = fs.writeSync(fd, data, off, data.length - off);
    if (n <= 0) throw new Error(`${file}: write failed after ${off} of ${data.length} bytes`);
    off += n;
  }
}

const CHECKPOINT_FILE = /^(config\.json|generation_config\.json|model\.safetensors(\.index\.json)?|model-\d{5}-of-\d{5}\.safetensors)$/;

/** The checkpoint files (configs, shards, index) already in `dir`. */
export function existingCheckpointFiles(dir: string): string[] {
  return fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => CHECKPOINT_FILE.test(f)) : [];
}

// Stale shards of another run would be picked up (or contradict the new index): remove or refuse them.
function clearOldCheckpoint(dir: string, replace: boolean): void {
  const old = existingCheckpointFiles(dir);
  if (old.length === 0) return;
  if (!replace) throw new Error(`${dir}: already holds a checkpoint (${old.join(", ")}); pass --force to replace it`);
  for (const f of old) fs.rmSync(path.join(dir, f));
}

/** Writes config.json, generation_config.json, the shards and model.safetensors.index.json into `dir`. */
export function writeSyntheticCheckpoint(dir: string, preset: SynthPreset, options: WriteOptions = {}): WriteResult {
  const seed = options.seed ?? 0;
  const tensors = tensorInventory(preset);
  const shards = planShards(tensors, preset.shardBytes);
  const totalBytes = shards.reduce((a, s) => a + s.bytes, 0);
  fs.mkdirSync(dir, { recursive: true });
  clearOldCheckpoint(dir, options.replace ?? false);
  const json = (file: string, value: unknown) =>
    fs.writeFileSync(path.join(dir, file), JSON.stringify(value, null, 2) + "\n");
  json("config.json", configJson(preset));
  json("generation_config.json", generationConfigJson(preset));

  let bytesDone = 0;
  shards.forEach((shard, k) => {
    const file = path.join(dir, shard.file);
    const fd = fs.openSync(file, "w");
    try {
      writeAll(fd, safetensorsHeader(shard.tensors), file);
      for (const t of shard.tensors) {
        for (const slice of tensorSlices(t, seed)) {
          writeAll(fd, slice, file);
          bytesDone += slice.length;
          options.onProgress?.({ bytesDone, bytesTotal: totalBytes, shard: k + 1, shards: shards.length });
        }
      }
    } finally {
      fs.closeSync(fd);
    }
    options.onShard?.(shard, k, shards.length);
  });

  // The index goes last: a directory without it is visibly incomplete. Keys sorted, as mlx writes them.
  if (shards.length > 1) {
    const weightMap: Record<string, string> = {};
    const entries = shards.flatMap((s) => s.tensors.map((t) => [t.name, s.file] as const));
    for (const [name, file] of entries.sort((a, b) => (a[0] < b[0] ? -1 : 1))) weightMap[name] = file;
    json("model.safetensors.index.json", { metadata: { total_size: totalBytes }, weight_map: weightMap });
  }
  return { shards, totalBytes };
}
