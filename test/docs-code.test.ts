// Every TypeScript block of README.md and docs/*.md type-checks against the package's types, as a
// strict project of a user would check it (test/helpers/doc-blocks.ts: the markers for blocks that
// continue one another and for notebook cells).
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { CELL_GLOBALS } from "../kernel/cell-api";
import { checkDocPrograms, docBlocks, docPrograms } from "./helpers/doc-blocks";

const root = path.resolve(__dirname, "..");
const docs = [path.join(root, "README.md"), ...fs.readdirSync(path.join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => path.join(root, "docs", f))];
const options = {
  root,
  paths: { moelens: path.join(root, "sdk", "index.ts"), tslab: path.join(root, "kernel", "tslab.ts") },
  cellGlobals: Object.keys(CELL_GLOBALS)
    .map((name) => `declare const ${name}: typeof import(${JSON.stringify(path.join(root, "kernel", "cell-api"))}).${name};`)
    .join("\n"),
};

describe("code blocks in the docs", () => {
  it("every TypeScript block of README.md and docs/*.md type-checks", () => {
    const programs = docPrograms(docs.flatMap((f) => docBlocks(f)), root);
    expect(programs.length).toBeGreaterThanOrEqual(12);
    expect(programs.filter((p) => p.name.startsWith("README.md")).length).toBeGreaterThanOrEqual(1);
    expect(checkDocPrograms(programs, options)).toEqual([]);
  }, 120_000);

  it("reports an error at its line of the Markdown file, through continued blocks", () => {
    const file = path.join(root, "docs", "example.md");
    const text = [
      "# Example",
      "```ts",
      'import { load } from "moelens";',
      "const model = await load();",
      "```",
      "Then:",
      "```ts continued",
      "const r = await model.session().prefill(ids);",
      "r.router.ids;",
      "```",
      "```ts cell",
      'display("shown");',
      "```",
      "```bash",
      "```ts inside another block is not code",
      "```",
      "```ts",
      'display("not a cell");',
      "```",
    ].join("\n");
    const programs = docPrograms(docBlocks(file, text), root);
    expect(programs.map((p) => [p.name, p.kind])).toEqual([
      ["docs/example.md:3", "module"],
      ["docs/example.md:12", "cell"],
      ["docs/example.md:18", "module"],
    ]);
    expect(checkDocPrograms(programs, options)).toEqual([
      "docs/example.md:8: TS2304: Cannot find name 'ids'.",
      "docs/example.md:9: TS18048: 'r.router' is possibly 'undefined'.",
      "docs/example.md:18: TS2304: Cannot find name 'display'.",
    ]);
    expect(() => docBlocks(file, "```ts fragment\nx\n```")).toThrow("docs/example.md:1: unknown code block marker 'fragment' (known: continued, cell)".replace("docs/example.md", file));
  }, 120_000);
});
