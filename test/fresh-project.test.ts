// Scripting where users are: a fresh npm project outside the repository installs moelens from an
// `npm pack` tarball (offline, test/helpers/offline-project.ts) and runs the README's example and
// docs/examples/generate.ts with tsx and with ts-node, as docs/scripting.md instructs, in an ES module
// project and in a CommonJS one, with the tsconfig the docs show; `tsc --noEmit` checks them too.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { docBlocks, docPrograms } from "./helpers/doc-blocks";
import { ensureBuiltDist } from "./helpers/built-dist";
import { freshProject, packRepository, run, type FreshProject } from "./helpers/offline-project";

const root = path.resolve(__dirname, "..");
const scripting = fs.readFileSync(path.join(root, "docs", "scripting.md"), "utf8");

// The tsconfig the docs show after a heading, e.g. "**ES modules**".
function documentedTsconfig(heading: string): string {
  const at = scripting.indexOf(heading);
  expect(at, heading).toBeGreaterThan(0);
  const block = /```json\n([\s\S]*?)\n```/.exec(scripting.slice(at));
  expect(block, heading).not.toBeNull();
  JSON.parse(block![1]);
  return block![1];
}

// The command lines the docs show for running a script, e.g. "npx tsx script.ts".
function documentedCommand(heading: string, runner: RegExp): string[] {
  const at = scripting.indexOf(heading);
  const block = /```bash\n([\s\S]*?)\n```/.exec(scripting.slice(at))![1];
  const line = block.split("\n").find((l) => runner.test(l));
  expect(line, `${heading} ${runner}`).toBeDefined();
  return line!.replace(/#.*$/, "").trim().split(/\s+/);
}

const readme = docPrograms(docBlocks(path.join(root, "README.md")), root)[0];
let scratch: string;
let tarball: string;

beforeAll(() => {
  ensureBuiltDist(root);
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-pack-"));
  tarball = packRepository(root, scratch);
}, 300_000);
afterAll(() => {
  if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
});

function runScript(project: FreshProject, command: string[], script: string) {
  const [bin, ...args] = command.map((a) => (a === "script.ts" ? script : a));
  return run(bin, args, project.dir);
}

describe("a fresh ES module project (\"type\": \"module\")", () => {
  let project: FreshProject;
  beforeAll(() => {
    project = freshProject(root, tarball, { type: "module", devDependencies: ["tsx", "ts-node", "typescript"] });
    fs.writeFileSync(path.join(project.dir, "tsconfig.json"), documentedTsconfig("**ES modules**"));
    fs.writeFileSync(path.join(project.dir, "readme.ts"), readme.code);
  }, 300_000);
  afterAll(() => project?.remove());

  it("installed moelens from the tarball, offline", () => {
    const manifest = JSON.parse(fs.readFileSync(path.join(project.dir, "package.json"), "utf8"));
    expect(manifest.dependencies.moelens).toBe(`file:${path.relative(project.dir, tarball)}`);
    expect(fs.existsSync(path.join(project.dir, "node_modules", "moelens", "dist", "sdk", "index.d.ts"))).toBe(true);
    expect(fs.existsSync(path.join(project.dir, "node_modules", "moelens", "test"))).toBe(false);
  });

  it("runs the README's example with tsx and with ts-node, to the same output", () => {
    expect(readme.name).toBe(`README.md:${readme.blocks[0].line}`);
    expect(readme.blocks.length).toBeGreaterThanOrEqual(2);
    const outputs = [/^npx tsx /, /--loader ts-node/].map((runner) => {
      const r = runScript(project, documentedCommand("**ES modules**", runner), "readme.ts");
      expect(r.stderr, runner.source).toBe("");
      expect(r.status, runner.source).toBe(0);
      return r.stdout;
    });
    expect(outputs[0]).toMatch(/^\[ 8, \d+, 4 \]\n./); // the embedded model: 8 layers, top-4 experts
    expect(outputs[1]).toBe(outputs[0]);
  }, 300_000);

  it("type-checks it with tsc and the documented tsconfig", () => {
    const r = run("npx", ["tsc", "--noEmit"], project.dir);
    expect(r.stdout + r.stderr).toBe("");
    expect(r.status).toBe(0);
  }, 300_000);
});

describe("a fresh CommonJS project", () => {
  let project: FreshProject;
  beforeAll(() => {
    project = freshProject(root, tarball, { type: "commonjs", devDependencies: ["tsx", "ts-node", "typescript"] });
    fs.writeFileSync(path.join(project.dir, "tsconfig.json"), documentedTsconfig("**CommonJS**"));
    fs.copyFileSync(path.join(root, "docs", "examples", "generate.ts"), path.join(project.dir, "generate.ts"));
  }, 300_000);
  afterAll(() => project?.remove());

  it("runs docs/examples/generate.ts with tsx and with ts-node, to the same output", () => {
    const outputs = [/^npx tsx /, /^npx ts-node /].map((runner) => {
      const r = runScript(project, documentedCommand("**CommonJS**", runner), "generate.ts");
      expect(r.stderr, runner.source).toBe("");
      expect(r.status, runner.source).toBe(0);
      return r.stdout;
    });
    expect(outputs[0].split("\n")[1]).toBe("true"); // decode(encode(text)) === text
    expect(outputs[0]).toMatch(/\[length: 30 tokens, [\d.]+ tok\/s\]/);
    expect(outputs[0].match(/\[fed \d+ new prompt tokens\]/g)?.length).toBe(2);
    // Up to the chat, which samples without a seed, both runners print the same.
    const seeded = (s: string) => s.slice(0, s.indexOf("> Name three colours.")).replace(/[\d.]+ tok\/s/g, "");
    expect(seeded(outputs[1])).toBe(seeded(outputs[0]));
    expect(seeded(outputs[0]).length).toBeGreaterThan(0);
  }, 300_000);

  it("type-checks it with tsc and the documented tsconfig", () => {
    const r = run("npx", ["tsc", "--noEmit"], project.dir);
    expect(r.stdout + r.stderr).toBe("");
    expect(r.status).toBe(0);
  }, 300_000);
});
