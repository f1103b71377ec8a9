// The reference fixtures under test/fixtures: each folder holds one tiny model in one or both
// checkpoint layouts (hf/, mlx/) and the transformers outputs for each (ref_hf / ref_mlx).
import * as fs from "node:fs";
import * as path from "node:path";
import { readSafetensors, type RefTensor } from "./safetensors";

export const fixturesDir = path.resolve(__dirname, "..", "fixtures");

export interface FixtureCase {
  name: string; // e.g. "t1/mlx"
  modelDir: string;
  ref: Map<string, RefTensor>;
  prompts: string[]; // "p0", "p1", ...
}

export function fixtureCases(): FixtureCase[] {
  const cases: FixtureCase[] = [];
  for (const fixture of fs.readdirSync(fixturesDir).sort()) {
    for (const layout of ["hf", "mlx"]) {
      const refFile = path.join(fixturesDir, fixture, `ref_${layout}.safetensors`);
      const modelDir = path.join(fixturesDir, fixture, layout);
      if (!fs.existsSync(refFile) || !fs.existsSync(modelDir)) continue;
      const ref = readSafetensors(refFile);
      const prompts = [...ref.keys()]
        .filter((k) => k.endsWith(".input_ids"))
        .map((k) => k.split(".")[0])
        .sort();
      cases.push({ name: `${fixture}/${layout}`, modelDir, ref, prompts });
    }
  }
  return cases;
}

export function get(ref: Map<string, RefTensor>, key: string): RefTensor {
  const t = ref.get(key);
  if (!t) throw new Error(`reference tensor ${key} missing`);
  return t;
}
