// Source code for the "code" domain: readable (not minified) files of permissively licensed packages
// that npm installs for this project. Each package's license is read from its package.json and must
// be on the allow list. Files are cut at line boundaries into documents of at most CHUNK_CHARS.
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { stableHash, type Document } from "./document";

export interface CodeSource {
  pkg: string;
  /** Files or folders inside the package, walked in sorted order. */
  roots: string[];
  /** Stop taking this package's text after this many characters. */
  capBytes: number;
}

export const CODE_SOURCES: CodeSource[] = [
  { pkg: "typescript", roots: ["lib/typescript.js", "lib/lib.es5.d.ts"], capBytes: 1_500_000 },
  { pkg: "openai", roots: ["src"], capBytes: 1_000_000 },
  { pkg: "apache-arrow", roots: ["src"], capBytes: 800_000 },
  { pkg: "@huggingface/jinja", roots: ["src"], capBytes: 300_000 },
  { pkg: "flatbuffers", roots: ["ts"], capBytes: 300_000 },
  { pkg: "acorn", roots: ["dist/acorn.js"], capBytes: 300_000 },
  { pkg: "diff", roots: ["lib/diff", "lib/patch", "lib/util", "lib/convert"], capBytes: 200_000 },
  { pkg: "yargs", roots: ["build/lib"], capBytes: 300_000 },
  { pkg: "yargs-parser", roots: ["build/lib"], capBytes: 100_000 },
  { pkg: "semver", roots: ["classes", "functions", "internal", "ranges"], capBytes: 100_000 },
  { pkg: "chai", roots: ["index.js"], capBytes: 200_000 },
  { pkg: "postcss", roots: ["lib"], capBytes: 200_000 },
  { pkg: "magic-string", roots: ["dist/magic-string.es.mjs"], capBytes: 100_000 },
  { pkg: "picomatch", roots: ["lib"], capBytes: 100_000 },
  { pkg: "fs-extra", roots: ["lib"], capBytes: 100_000 },
  { pkg: "minimist", roots: ["index.js"], capBytes: 50_000 },
  { pkg: "debug", roots: ["src"], capBytes: 50_000 },
  { pkg: "source-map-js", roots: ["lib"], capBytes: 150_000 },
  { pkg: "cmake-js", roots: ["lib"], capBytes: 150_000 },
  { pkg: "ts-node", roots: ["dist"], capBytes: 300_000 },
  { pkg: "node-addon-api", roots: ["napi.h", "napi-inl.h"], capBytes: 400_000 },
];

const ALLOWED_LICENSES = new Set(["MIT", "ISC", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "0BSD"]);
const EXTENSIONS = [".ts", ".js", ".mjs", ".cjs", ".h"];
const CHUNK_CHARS = 16_000;
// Longer average lines than this mean generated or minified code.
const MAX_MEAN_LINE = 160;

export interface CodePackage {
  name: string;
  version: string;
  license: string;
  files: number;
  bytes: number;
}

function listFiles(pkgDir: string, root: string): string[] {
  const full = path.join(pkgDir, root);
  if (!fs.existsSync(full)) throw new Error(`${full}: listed in CODE_SOURCES but missing`);
  if (fs.statSync(full).isFile()) return [full];
  const out: string[] = [];
  for (const e of fs.readdirSync(full, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const p = path.join(full, e.name);
    // Vendored code carries other licenses than its package's.
    if (e.isDirectory() && !/^_?vendor$/.test(e.name)) out.push(...listFiles(pkgDir, path.relative(pkgDir, p)));
    else if (e.isDirectory()) continue;
    else out.push(p);
  }
  return out;
}

function wanted(file: string, explicit: boolean): boolean {
  const base = path.basename(file);
  if (!EXTENSIONS.some((e) => base.endsWith(e)) || base.includes(".min.")) return false;
  // Declaration files repeat the sources; take them only where a root names one.
  return explicit || !/\.d\.[cm]?ts$/.test(base);
}

/** Splits at line boundaries into pieces of at most CHUNK_CHARS (a longer single line stays whole). */
export function chunkLines(text: string): string[] {
  const chunks: string[] = [];
  let current = "";
  for (const line of text.split(/(?<=\n)/)) {
    if (current.length + line.length > CHUNK_CHARS && current.length > 0) {
      chunks.push(current);
      current = "";
    }
    current += line;
  }
  if (current.trim().length > 0) chunks.push(current);
  return chunks;
}

export function codeDocuments(modulesDir: string): { documents: Document[]; packages: CodePackage[] } {
  const documents: Document[] = [];
  const packages: CodePackage[] = [];
  const seenContent = new Set<string>();
  for (const src of CODE_SOURCES) {
    const pkgDir = path.join(modulesDir, src.pkg);
    const manifest = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
    const license = String(manifest.license ?? "");
    if (!ALLOWED_LICENSES.has(license)) {
      throw new Error(`${pkgDir}/package.json: license '${license}' is not on the allow list`);
    }
    let bytes = 0;
    let files = 0;
    outer: for (const root of src.roots) {
      const explicit = fs.statSync(path.join(pkgDir, root)).isFile();
      for (const file of listFiles(pkgDir, root)) {
        if (!wanted(file, explicit)) continue;
        const text = fs.readFileSync(file, "utf8").replace(/\r\n/g, "\n");
        const lines = text.split("\n").length;
        if (text.length / lines > MAX_MEAN_LINE) continue;
        const digest = crypto.createHash("sha256").update(text).digest("hex");
        if (seenContent.has(digest)) continue;
        seenContent.add(digest);
        files++;
        const rel = path.relative(modulesDir, file).split(path.sep).join("/");
        const chunks = chunkLines(text);
        for (let c = 0; c < chunks.length; c++) {
          if (bytes >= src.capBytes) break outer;
          const source = chunks.length > 1 ? `${rel}#${c}` : rel;
          documents.push({
            domain: "code",
            genre: src.pkg,
            source,
            license,
            text: chunks[c],
            split: stableHash(source) % 20 === 3 ? "heldout" : "train",
          });
          bytes += chunks[c].length;
        }
      }
    }
    if (files === 0) throw new Error(`${pkgDir}: no source files found under ${src.roots.join(", ")}`);
    packages.push({ name: src.pkg, version: String(manifest.version), license, files, bytes });
  }
  return { documents, packages };
}
