// Fuzzing the loader: 10,000 mutated safetensors files and configs. Every case must either load
// (and then run a forward pass) or reject with an Error whose message names what is wrong; the
// process must never crash or hang.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, expect, test } from "vitest";
import { load } from "moelens";
import { TINY_TEXT_CONFIG, mulberry32, safetensorsBytes, tinyTensors } from "./helpers/checkpoint-writer";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-fuzz-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

const t1 = path.join(__dirname, "fixtures", "t1", "mlx");
const MLX_WEIGHTS = new Uint8Array(fs.readFileSync(path.join(t1, "model.safetensors")));
const MLX_CONFIG = JSON.parse(fs.readFileSync(path.join(t1, "config.json"), "utf8"));
const TINY_WEIGHTS = safetensorsBytes(tinyTensors(7));

type Rand = () => number;
const pick = <T>(r: Rand, items: readonly T[]): T => items[Math.floor(r() * items.length)];

function headerOf(bytes: Uint8Array): { json: any; dataStart: number } {
  const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  return { json: JSON.parse(Buffer.from(bytes.subarray(8, 8 + n)).toString("utf8")), dataStart: 8 + n };
}

function withJsonHeader(bytes: Uint8Array, header: unknown): Uint8Array {
  const { dataStart } = headerOf(bytes);
  const json = Buffer.from(JSON.stringify(header), "utf8");
  const out = new Uint8Array(8 + json.length + bytes.length - dataStart);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  out.set(bytes.subarray(dataStart), 8 + json.length);
  return out;
}

const INTERESTING = [0, -1, 1, 2, 3, 7, 8, 64, 255, 1e9, 2 ** 53, -(2 ** 31), 0.5, 1e300, "x", null, true, [], {}];

// Byte-level damage: flips, truncation, header length.
function mutateBytes(r: Rand, src: Uint8Array): Uint8Array {
  const b = src.slice();
  const { dataStart } = headerOf(src);
  switch (Math.floor(r() * 4)) {
    case 0: // flip bytes in the header
      for (let k = 1 + Math.floor(r() * 4); k > 0; k--) b[8 + Math.floor(r() * (dataStart - 8))] ^= 1 << Math.floor(r() * 8);
      return b;
    case 1: // flip bytes anywhere
      for (let k = 1 + Math.floor(r() * 8); k > 0; k--) b[Math.floor(r() * b.length)] = Math.floor(r() * 256);
      return b;
    case 2: // truncate
      return b.subarray(0, Math.floor(r() * b.length));
    default: { // header length
      const view = new DataView(b.buffer);
      const choices = [0n, 1n, 7n, BigInt(dataStart - 9), BigInt(dataStart - 7), BigInt(b.length), 2n ** 63n, 2n ** 64n - 1n];
      view.setBigUint64(0, pick(r, choices), true);
      return b;
    }
  }
}

// Structural damage to the header: dtypes, shapes, offsets, names.
function mutateHeader(r: Rand, src: Uint8Array): Uint8Array {
  const { json } = headerOf(src);
  const names = Object.keys(json).filter((k) => k !== "__metadata__");
  for (let k = 1 + Math.floor(r() * 3); k > 0; k--) {
    const name = pick(r, names);
    const e = json[name];
    // Earlier mutations may have replaced the entry with a non-entry: only edit well-formed ones.
    if (!e || !Array.isArray(e.shape) || !Array.isArray(e.data_offsets)) continue;
    switch (Math.floor(r() * 8)) {
      case 0: e.dtype = pick(r, ["F32", "F16", "BF16", "U32", "I32", "U8", "I64", "BOOL", "F8_E4M3", "q4", 3, null]); break;
      case 1: e.shape = e.shape.map((d: number) => (r() < 0.5 ? d : pick(r, INTERESTING))); break;
      case 2: e.shape = r() < 0.5 ? [...e.shape].reverse() : e.shape.slice(0, Math.floor(r() * e.shape.length)); break;
      case 3: e.data_offsets = e.data_offsets.map((d: number) => (r() < 0.5 ? d : pick(r, INTERESTING))); break;
      case 4: { const other = json[pick(r, names)]; if (Array.isArray(other?.data_offsets)) e.data_offsets = [...other.data_offsets]; break; }
      case 5: delete json[name]; break;
      case 6: json[name.replace(/\d+/, (d) => String(Number(d) + 1 + Math.floor(r() * 3)))] = e; delete json[name]; break;
      default: json[name] = pick(r, INTERESTING); break;
    }
  }
  return withJsonHeader(src, json);
}

// Config damage: delete, retype or change fields (at the top level, in text_config, in quantization).
function mutateConfig(r: Rand, src: any): unknown {
  const c = JSON.parse(JSON.stringify(src));
  for (let k = 1 + Math.floor(r() * 3); k > 0; k--) {
    const scopes = [c, c.text_config, c.quantization, c.text_config?.rope_parameters].filter((x) => x && typeof x === "object");
    const scope = pick(r, scopes);
    const keys = Object.keys(scope);
    if (keys.length === 0) continue;
    const key = pick(r, keys);
    if (r() < 0.25) delete scope[key];
    else if (typeof scope[key] === "number" && r() < 0.6) scope[key] = scope[key] * pick(r, [0, 2, 0.5, -1, 3]) + pick(r, [0, 1, -1]);
    else scope[key] = pick(r, INTERESTING);
  }
  return c;
}

test("10,000 mutated checkpoints and configs never crash the process", async () => {
  const r = mulberry32(20261130);
  let loaded = 0;
  let rejected = 0;
  const N = 10_000;
  for (let i = 0; i < N; i++) {
    const mlx = r() < 0.4;
    const baseWeights = mlx ? MLX_WEIGHTS : TINY_WEIGHTS;
    const baseConfig = mlx ? MLX_CONFIG : TINY_TEXT_CONFIG;
    let weights = baseWeights;
    let config: unknown = baseConfig;
    const kind = Math.floor(r() * 3);
    if (kind === 0) weights = mutateBytes(r, baseWeights);
    else if (kind === 1) weights = mutateHeader(r, baseWeights);
    else config = mutateConfig(r, baseConfig);

    const dir = path.join(root, `case${i}`);
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(config));
    fs.writeFileSync(path.join(dir, "model.safetensors"), weights);
    try {
      const model = await load(dir).catch((e: unknown) => {
        rejected++;
        expect(e, `case ${i}`).toBeInstanceOf(Error);
        // Errors name the checkpoint file or folder at fault (and the tensor or field in it).
        expect((e as Error).message.includes(dir), `case ${i}: ${(e as Error).message}`).toBe(true);
        return null;
      });
      if (!model) continue;
      loaded++;
      // A model that loads must also run; the only acceptable refusal is a config's tiny context.
      const s = model.session();
      const vocab = model.config.vocabSize;
      await s
        .prefill([0, 1 % vocab, 2 % vocab], { capture: ["router"] })
        .then(() => s.decode(3 % vocab))
        .catch((e: unknown) => expect((e as Error).message, `case ${i}`).toMatch(/context overflow/));
      model.dispose();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  expect(loaded + rejected).toBe(N);
  // Both outcomes occur: the fuzzer reaches past the parser.
  expect(rejected).toBeGreaterThan(N / 2);
  expect(loaded).toBeGreaterThan(50);
}, 600_000);
