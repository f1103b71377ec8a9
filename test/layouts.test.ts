// The same weights stored in every layout the loader accepts give the same model: fused, stacked and
// per-expert experts; BF16, F16 and F32 tensors; one file or shards.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, expect, test } from "vitest";
import { load } from "moelens";
import { TINY_TEXT_CONFIG, safetensorsBytes, tinyTensors, writeModelDir, type RawTensor } from "./helpers/checkpoint-writer";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-layouts-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
const prompt = [3, 14, 15, 9, 26, 5, 35, 8, 9, 7];

async function logitsOf(dir: string): Promise<Float32Array> {
  const model = await load(dir, { fresh: true });
  return (await model.session().prefill(prompt, { logits: "all" })).logits.data;
}

function bf16ToF32(t: RawTensor): Float32Array {
  const u16 = new Uint16Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
  const u32 = new Uint32Array(u16.length);
  for (let i = 0; i < u16.length; i++) u32[i] = u16[i] << 16;
  return new Float32Array(u32.buffer);
}

// Rows [r0, r1) of each expert of a [E, R, C] tensor, as a [r1 - r0, C] tensor for one expert.
function expertSlice(t: RawTensor, e: number, r0: number, r1: number): RawTensor {
  const [, R, C] = t.shape;
  const bytes = 2;
  const start = (e * R + r0) * C * bytes;
  return { dtype: t.dtype, shape: [r1 - r0, C], data: t.data.slice(start, start + (r1 - r0) * C * bytes) };
}

test("fused, per-expert, F16/F32 and sharded storage of one model give identical logits", async () => {
  const base = tinyTensors(3);
  const reference = await logitsOf(writeModelDir(path.join(root, "fused"), TINY_TEXT_CONFIG, safetensorsBytes(base)));

  // One module per expert (as some converters write): experts.{e}.{gate,up,down}_proj.weight.
  const perExpert = new Map<string, RawTensor>();
  const I = TINY_TEXT_CONFIG.moe_intermediate_size;
  for (const [name, t] of base) {
    const m = name.match(/^(.*\.mlp\.)experts\.(gate_up_proj|down_proj)$/);
    if (!m) {
      perExpert.set(name, t);
      continue;
    }
    for (let e = 0; e < TINY_TEXT_CONFIG.num_experts; e++) {
      if (m[2] === "gate_up_proj") {
        perExpert.set(`${m[1]}experts.${e}.gate_proj.weight`, expertSlice(t, e, 0, I));
        perExpert.set(`${m[1]}experts.${e}.up_proj.weight`, expertSlice(t, e, I, 2 * I));
      } else {
        perExpert.set(`${m[1]}experts.${e}.down_proj.weight`, expertSlice(t, e, 0, t.shape[1]));
      }
    }
  }
  const perExpertLogits = await logitsOf(writeModelDir(path.join(root, "per-expert"), TINY_TEXT_CONFIG, safetensorsBytes(perExpert)));
  expect(Array.from(perExpertLogits)).toEqual(Array.from(reference));

  // F32 and F16 copies of the BF16 values (exact: bf16 values of this size fit both).
  for (const dtype of ["F32", "F16"] as const) {
    const converted = new Map<string, RawTensor>();
    for (const [name, t] of base) {
      const f = bf16ToF32(t);
      const data = dtype === "F32" ? new Uint8Array(f.buffer) : new Uint8Array(toF16(f).buffer);
      converted.set(name, { dtype, shape: t.shape, data });
    }
    const out = await logitsOf(writeModelDir(path.join(root, dtype), TINY_TEXT_CONFIG, safetensorsBytes(converted)));
    for (let i = 0; i < reference.length; i++) expect(Math.abs(out[i] - reference[i])).toBeLessThan(1e-4);
  }

  // Shards listed in model.safetensors.index.json.
  const dir = path.join(root, "sharded");
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(TINY_TEXT_CONFIG));
  const names = [...base.keys()];
  const halves = [names.slice(0, names.length / 2), names.slice(names.length / 2)];
  const weightMap: Record<string, string> = {};
  halves.forEach((part, k) => {
    const file = `model-0000${k + 1}-of-00002.safetensors`;
    fs.writeFileSync(path.join(dir, file), safetensorsBytes(new Map(part.map((n) => [n, base.get(n)!]))));
    for (const n of part) weightMap[n] = file;
  });
  fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: weightMap }));
  expect(Array.from(await logitsOf(dir))).toEqual(Array.from(reference));
});

// float32 -> IEEE half, round to nearest even; values below the normal range become 0.
function toF16(f: Float32Array): Uint16Array {
  const out = new Uint16Array(f.length);
  const u = new Uint32Array(f.buffer, f.byteOffset, f.length);
  for (let i = 0; i < f.length; i++) {
    const x = u[i];
    const sign = (x >>> 16) & 0x8000;
    const exp = ((x >>> 23) & 0xff) - 127 + 15;
    let mant = x & 0x7fffff;
    if (exp <= 0) {
      out[i] = sign; // below f16's normal range: 0 (the comparison tolerance covers these few weights)
      continue;
    }
    let h = sign | (exp << 10) | (mant >>> 13);
    mant &= 0x1fff;
    if (mant > 0x1000 || (mant === 0x1000 && (h & 1))) h++;
    out[i] = h;
  }
  return out;
}
