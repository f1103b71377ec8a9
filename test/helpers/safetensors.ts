// Reads the reference-output files (F32 / I32 tensors) that scripts/reference writes.
import * as fs from "node:fs";

export interface RefTensor {
  shape: number[];
  data: Float32Array | Int32Array;
}

export function readSafetensors(file: string): Map<string, RefTensor> {
  const buf = fs.readFileSync(file);
  const headerLen = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + headerLen).toString("utf8")) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const base = 8 + headerLen;
  const out = new Map<string, RefTensor>();
  for (const [name, e] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [b, end] = e.data_offsets;
    const bytes = buf.subarray(base + b, base + end);
    const copy = new ArrayBuffer(bytes.length);
    new Uint8Array(copy).set(bytes);
    if (e.dtype === "F32") out.set(name, { shape: e.shape, data: new Float32Array(copy) });
    else if (e.dtype === "I32") out.set(name, { shape: e.shape, data: new Int32Array(copy) });
    else throw new Error(`${file}: tensor ${name} has unsupported dtype ${e.dtype}`);
  }
  return out;
}

export function std(values: ArrayLike<number>): number {
  let mean = 0;
  for (let i = 0; i < values.length; i++) mean += values[i];
  mean /= values.length;
  let v = 0;
  for (let i = 0; i < values.length; i++) v += (values[i] - mean) ** 2;
  return Math.sqrt(v / values.length);
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length mismatch ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}
