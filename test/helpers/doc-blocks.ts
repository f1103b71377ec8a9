// The TypeScript code blocks of the Markdown docs, as the programs they make (docs/scripting.md,
// "Code blocks in the docs", describes the markers):
//   ```ts            a complete ES module (top-level await allowed)
//   ```ts continued  continues the previous block of the same file: checked (and run) as one program
//   ```ts cell       a cell of the moelens Jupyter kernel: its globals (display, ...) are in scope
import * as fs from "node:fs";
import * as path from "node:path";
import * as ts from "typescript";

export type BlockKind = "module" | "continued" | "cell";

export interface DocBlock {
  file: string;
  /** 1-based line of the block's first code line in the Markdown file. */
  line: number;
  kind: BlockKind;
  code: string;
}

export interface DocProgram {
  /** "README.md:27": where its first block starts. */
  name: string;
  kind: "module" | "cell";
  blocks: DocBlock[];
  code: string;
  /** The Markdown file and line of a 0-based line of `code`. */
  where(line: number): string;
}

const KINDS: Record<string, BlockKind> = { "": "module", continued: "continued", cell: "cell" };

/** The ```ts / ```typescript blocks of a Markdown file. */
export function docBlocks(file: string, text = fs.readFileSync(file, "utf8")): DocBlock[] {
  const blocks: DocBlock[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(ts|typescript)\b\s*(.*)$/.exec(lines[i]);
    if (!open) {
      if (/^```/.test(lines[i])) for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++); // other languages
      continue;
    }
    const marker = open[2].trim();
    const kind = KINDS[marker];
    if (kind === undefined) throw new Error(`${file}:${i + 1}: unknown code block marker '${marker}' (known: continued, cell)`);
    const start = i + 1;
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++);
    if (i >= lines.length) throw new Error(`${file}:${start}: the code block is not closed`);
    blocks.push({ file, line: start + 1, kind, code: lines.slice(start, i).join("\n") });
  }
  return blocks;
}

/** The programs of some blocks: each block, with the `continued` blocks that follow it. */
export function docPrograms(blocks: DocBlock[], root: string): DocProgram[] {
  const programs: { kind: "module" | "cell"; blocks: DocBlock[] }[] = [];
  for (const b of blocks) {
    const previous = programs[programs.length - 1];
    if (b.kind === "continued") {
      if (!previous || previous.blocks[0].file !== b.file) throw new Error(`${b.file}:${b.line}: a 'continued' block needs a block before it in the same file`);
      previous.blocks.push(b);
    } else {
      programs.push({ kind: b.kind, blocks: [b] });
    }
  }
  return programs.map(({ kind, blocks: parts }) => {
    const starts: { at: number; block: DocBlock }[] = [];
    let code = "";
    let at = 0;
    for (const b of parts) {
      starts.push({ at, block: b });
      code += b.code + "\n";
      at += b.code.split("\n").length;
    }
    return {
      name: `${path.relative(root, parts[0].file)}:${parts[0].line}`,
      kind,
      blocks: parts,
      code,
      where(line: number) {
        const s = [...starts].reverse().find((x) => x.at <= line)!;
        return `${path.relative(root, s.block.file)}:${s.block.line + line - s.at}`;
      },
    };
  });
}

export interface CheckOptions {
  root: string;
  /** Module name -> entry (.ts or .d.ts) that `import` of that name means. */
  paths: Record<string, string>;
  /** Declarations in scope of `cell` programs. */
  cellGlobals: string;
}

/** Type-checks the programs as a user's strict project would; returns "file:line: message" per error. */
export function checkDocPrograms(programs: DocProgram[], options: CheckOptions): string[] {
  const errors: string[] = [];
  for (const kind of ["module", "cell"] as const) {
    const mine = programs.filter((p) => p.kind === kind);
    if (mine.length === 0) continue;
    // Virtual files inside the repository, so that its node_modules resolve.
    const dir = path.join(options.root, "docs", ".code-blocks");
    const files = new Map<string, { program: DocProgram; text: string }>();
    mine.forEach((p, i) => files.set(path.join(dir, `block-${i}.ts`), { program: p, text: p.code }));
    const globals = path.join(dir, "cell-globals.d.ts");
    const compilerOptions: ts.CompilerOptions = {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      moduleDetection: ts.ModuleDetectionKind.Force,
      lib: ["lib.es2023.d.ts"],
      types: ["node"],
      strict: true,
      skipLibCheck: true,
      esModuleInterop: true,
      noEmit: true,
      paths: Object.fromEntries(Object.entries(options.paths).map(([name, entry]) => [name, [entry]])),
    };
    const host = ts.createCompilerHost(compilerOptions);
    const read = (f: string) => (f === globals ? options.cellGlobals : files.get(f)?.text);
    const { getSourceFile, fileExists, readFile } = host;
    host.getSourceFile = (f, language, ...rest) => {
      const text = read(f);
      return text !== undefined ? ts.createSourceFile(f, text, language) : getSourceFile.call(host, f, language, ...rest);
    };
    host.fileExists = (f) => read(f) !== undefined || fileExists.call(host, f);
    host.readFile = (f) => read(f) ?? readFile.call(host, f);
    const roots = [...files.keys(), ...(kind === "cell" ? [globals] : [])];
    const program = ts.createProgram(roots, compilerOptions, host);
    for (const d of ts.getPreEmitDiagnostics(program)) {
      const message = ts.flattenDiagnosticMessageText(d.messageText, "\n");
      const owner = d.file && files.get(d.file.fileName);
      if (!owner || d.start === undefined) {
        errors.push(`${d.file?.fileName ?? "(options)"}: TS${d.code}: ${message}`);
        continue;
      }
      const { line } = d.file!.getLineAndCharacterOfPosition(d.start);
      errors.push(`${owner.program.where(line)}: TS${d.code}: ${message}`);
    }
  }
  return errors;
}
