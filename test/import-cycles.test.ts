// No import cycles in the TypeScript sources: each folder's modules form a graph that can be read
// (and loaded) from the leaves up. Type-only imports count too, since they tie the files together
// all the same. madge reads the imports the way the compiler resolves them (tsconfig.json's paths).
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import madge from "madge";
import { expect, test } from "vitest";

const root = path.resolve(__dirname, "..");
const SOURCES = ["sdk", "kernel", "bench", "scripts", "test"];

async function importGraph(dir: string, folders: string[]) {
  return madge(
    folders.map((f) => path.join(dir, f)),
    { baseDir: dir, fileExtensions: ["ts"], tsConfig: path.join(root, "tsconfig.json") },
  );
}

test("the sources import each other without cycles", async () => {
  const graph = await importGraph(root, SOURCES);
  // The graph holds the sources with their imports resolved (the package name too), not an empty set.
  expect(graph.obj()["sdk/session.ts"]).toContain("sdk/forward.ts");
  expect(graph.obj()["test/plot-display.test.ts"]).toContain("sdk/index.ts");
  expect(graph.circular()).toEqual([]);
});

test("a cycle, even through a type-only import, is found", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-cycles-"));
  try {
    fs.mkdirSync(path.join(dir, "src"));
    fs.writeFileSync(path.join(dir, "src", "trace.ts"), 'import { view } from "./view";\nexport class Trace {\n  show() {\n    return view(this);\n  }\n}\n');
    fs.writeFileSync(path.join(dir, "src", "view.ts"), 'import type { Trace } from "./trace";\nexport const view = (t: Trace) => String(t);\n');
    fs.writeFileSync(path.join(dir, "src", "leaf.ts"), 'import { Trace } from "./trace";\nexport const t = new Trace();\n');
    expect((await importGraph(dir, ["src"])).circular()).toEqual([["src/trace.ts", "src/view.ts"]]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
