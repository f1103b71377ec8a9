// Writes Arrow IPC files from real SDK traces plus the expected values as JSON, for check.py to read
// back with pyarrow and pandas (on any machine that has them).
// Usage: npx tsx scripts/arrow-check/write.ts OUT_DIR
import * as fs from "node:fs";
import * as path from "node:path";
import { load, writeArrowFile, writeArrowStream } from "../../sdk/index";

async function main(): Promise<void> {
  const out = process.argv[2];
  if (!out) throw new Error("usage: write.ts OUT_DIR");
  fs.mkdirSync(out, { recursive: true });
  const model = await load();
  const s = model.session();
  const ids = model.tokenizer!.encode("The jury said the city's election was well run.");
  const r = await s.prefill(ids, { capture: ["router", "deltanet"] });
  const tables = { router: r.router!.toArrow(), deltanet: r.deltanet!.toArrow(), load: s.expertLoad!.toArrow() };
  const expected: Record<string, Record<string, number[]>> = {};
  for (const [name, table] of Object.entries(tables)) {
    writeArrowFile(table, path.join(out, `${name}.arrow`));
    writeArrowStream(table, path.join(out, `${name}.arrows`));
    expected[name] = {};
    for (const field of table.schema.fields) expected[name][field.name] = Array.from(table.getChild(field.name)!.toArray(), Number);
  }
  fs.writeFileSync(path.join(out, "expected.json"), JSON.stringify(expected));
  console.log(`wrote ${Object.keys(tables).length} tables (file and stream) to ${out}`);
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
