// The repository describes the product: docs, comments, scripts and tests say what the software does,
// not how it was made. No numbered work steps or issues, no paths of particular machines, no names of
// the machines it was developed on used as process words. Results and their history belong in dated
// reports (docs/reports/), which follow the same rule. The patterns are spelt so that this file does
// not match them itself.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, test } from "vitest";

const root = path.resolve(__dirname, "..");

const PROCESS_WORDS: { what: string; pattern: RegExp }[] = [
  { what: "a numbered work step", pattern: /\b[Ss]tops?[ -][0-9]+/ },
  { what: "an issue number", pattern: /\b[Ii]ssues? #?[0-9]+\b/ },
  { what: "a path of a development machine", pattern: /\/w[o]rk\// },
  { what: "a development machine", pattern: /[Gg]PU [m]achine|H200 [m]achine/ },
  { what: "a remote runner's output folder", pattern: /\$[O]UT\b/ },
  { what: "notes of a work session", pattern: /\b[s]ession notes?\b|\bprevious [s]ession\b/ },
];

const SKIPPED = new Set(["package-lock.json"]);
const GENERATED_DIRS = new Set([".git", "node_modules", "build", "dist"]);

/** The repository's files: tracked and untracked but not ignored (git), else every file outside the build folders. */
function repositoryFiles(): string[] {
  try {
    const out = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: root, encoding: "utf8", maxBuffer: 64 << 20 });
    return out.split("\0").filter((f) => f && fs.existsSync(path.join(root, f)));
  } catch {
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const e of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
        const rel = path.join(dir, e.name);
        if (e.isDirectory()) {
          if (!GENERATED_DIRS.has(e.name)) walk(rel);
        } else if (e.isFile()) files.push(rel);
      }
    };
    walk("");
    return files;
  }
}

/** "file:line: text (what)" for every line of `text` that has a process word. */
function findProcessWords(file: string, text: string): string[] {
  const hits: string[] = [];
  text.split("\n").forEach((line, i) => {
    for (const { what, pattern } of PROCESS_WORDS) {
      if (pattern.test(line)) hits.push(`${file}:${i + 1}: ${line.trim().slice(0, 160)} (${what})`);
    }
  });
  return hits;
}

function isBinary(data: Buffer): boolean {
  return data.subarray(0, 8000).includes(0);
}

describe("repository wording", () => {
  test("the patterns find each kind of process word and pass product text", () => {
    const bad = [
      "Measured at st" + "op 16",
      "on the GPU mach" + "ine",
      "the CPU benchmark of iss" + "ue 8",
      "a st" + "op-16 run",
      "npx tsx bench/cpu-bench.ts --model /wo" + "rk/scratch/m",
      "bash bench/gpu/h200-bench.sh --out $O" + "UT/final",
      "on the H200 mach" + "ine",
      "see the sess" + "ion notes",
    ];
    for (const line of bad) expect(findProcessWords("f", line), line).toHaveLength(1);
    const good = [
      "generation stops on 248046 or 248044",
      "Stop before the first occurrence of any of these strings",
      "Bytes of backend memory this session holds",
      "One NVIDIA H200 (141 GB HBM3e), CUDA 13",
      "--out DIR       logs and results (default: the OUT environment variable)",
      "a known issue of the tokenizer",
    ];
    for (const line of good) expect(findProcessWords("f", line), line).toEqual([]);
  });

  test("no file of the repository has a process word", () => {
    const files = repositoryFiles().filter((f) => !SKIPPED.has(path.basename(f)));
    expect(files).toContain("README.md");
    const hits: string[] = [];
    for (const file of files) {
      const data = fs.readFileSync(path.join(root, file));
      if (!isBinary(data)) hits.push(...findProcessWords(file, data.toString("utf8")));
    }
    expect(hits).toEqual([]);
  });
});
