// Type-checks cells with one persistent TypeScript language service (lib and package types are
// parsed once per kernel), and answers completions and hover info from the same program.
//
// Each check is one virtual file in the notebook's folder: the declarations of earlier cells (see
// CellScope) followed by the cell, whose top-level declarations get an `export` so TypeScript can
// emit a declaration file for them, the source of the next cells' prelude.
import * as fs from "node:fs";
import * as path from "node:path";
import * as ts from "typescript";
import { CellScope, declaredNames } from "./cell-scope";

export interface TypeCheckerOptions {
  /** The notebook's folder: relative imports and node_modules resolve from here. */
  cwd: string;
  /** Modules the kernel provides, by name (KERNEL_MODULES: paths without extension, .ts sources or .d.ts). */
  modules: Readonly<Record<string, string>>;
  /** Ambient declarations every cell sees unless it redeclares the name (the cell globals). */
  globals: Record<string, string>;
}

export interface Completion {
  matches: string[];
  /** Cell offsets of the text the matches replace. */
  start: number;
  end: number;
}

const EXPORT = "export ";

// The `@types` folders to search: from the notebook's folder up, and next to this package (its own
// node_modules, or the node_modules it is installed in).
function typeRoots(cwd: string, sdkEntry: string): string[] {
  const roots: string[] = [];
  for (let dir = cwd; ; dir = path.dirname(dir)) {
    roots.push(path.join(dir, "node_modules", "@types"));
    if (path.dirname(dir) === dir) break;
  }
  for (let dir = path.dirname(sdkEntry); ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, "node_modules", "@types");
    if (!roots.includes(candidate)) roots.push(candidate);
    if (path.dirname(dir) === dir) break;
  }
  return roots.filter((r) => fs.existsSync(r));
}

function compilerOptions(options: TypeCheckerOptions): ts.CompilerOptions {
  const roots = typeRoots(options.cwd, options.modules.moelens);
  return {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    // Every cell is a module, so its declarations never clash with the prelude's globals.
    moduleDetection: ts.ModuleDetectionKind.Force,
    lib: ["lib.es2023.d.ts"],
    strict: true,
    // Notebook code is exploratory: untyped parameters and `catch (e) { e.message }` are fine.
    noImplicitAny: false,
    useUnknownInCatchVariables: false,
    esModuleInterop: true,
    skipLibCheck: true,
    resolveJsonModule: true,
    declaration: true,
    typeRoots: roots,
    types: roots.some((r) => fs.existsSync(path.join(r, "node"))) ? ["node"] : [],
    paths: Object.fromEntries(Object.entries(options.modules).map(([name, entry]) => [name, [entry]])),
  };
}

interface Layout {
  text: string;
  /** Where the cell starts in `text`. */
  cellStart: number;
  /** Cell offsets where "export " was inserted, ascending. */
  exports: number[];
}

export class CellTypeChecker {
  readonly scope = new CellScope();
  private readonly fileName: string;
  private readonly service: ts.LanguageService;
  private readonly diskSnapshots = new Map<string, ts.IScriptSnapshot | undefined>();
  private text = "";
  private version = 0;

  constructor(options: TypeCheckerOptions) {
    this.fileName = path.join(options.cwd, "__moelens_cell__.ts");
    for (const [name, text] of Object.entries(options.globals)) this.scope.define(name, text);
    const settings = compilerOptions(options);
    const host: ts.LanguageServiceHost = {
      getCompilationSettings: () => settings,
      getScriptFileNames: () => [this.fileName],
      getScriptVersion: (f) => (f === this.fileName ? String(this.version) : "0"),
      getScriptSnapshot: (f) => (f === this.fileName ? ts.ScriptSnapshot.fromString(this.text) : this.diskSnapshot(f)),
      getCurrentDirectory: () => options.cwd,
      getDefaultLibFileName: (o) => ts.getDefaultLibFilePath(o),
      fileExists: (f) => f === this.fileName || ts.sys.fileExists(f),
      readFile: (f) => (f === this.fileName ? this.text : ts.sys.readFile(f)),
      readDirectory: ts.sys.readDirectory,
      directoryExists: ts.sys.directoryExists,
      getDirectories: ts.sys.getDirectories,
      realpath: ts.sys.realpath,
    };
    this.service = ts.createLanguageService(host, ts.createDocumentRegistry());
  }

  // Files on disk (lib, @types, the SDK) are read once: a kernel session sees one version of them.
  private diskSnapshot(file: string): ts.IScriptSnapshot | undefined {
    if (!this.diskSnapshots.has(file)) {
      const text = ts.sys.readFile(file);
      this.diskSnapshots.set(file, text === undefined ? undefined : ts.ScriptSnapshot.fromString(text));
    }
    return this.diskSnapshots.get(file);
  }

  private layout(source: string, exportDeclarations: boolean): Layout {
    const cell = ts.createSourceFile("cell.ts", source, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
    const own = new Set(cell.statements.flatMap(declaredNames));
    const exports: number[] = [];
    if (exportDeclarations) {
      for (const s of cell.statements) {
        if (needsExport(s)) exports.push(s.getStart(cell));
      }
    }
    let body = "";
    let at = 0;
    for (const e of exports) {
      body += source.slice(at, e) + EXPORT;
      at = e;
    }
    body += source.slice(at);
    const prelude = this.scope.prelude(own) + "\n";
    return { text: prelude + body, cellStart: prelude.length, exports };
  }

  private update(layout: Layout): void {
    this.text = layout.text;
    this.version++;
  }

  private toCell(layout: Layout, position: number): number | undefined {
    let q = position - layout.cellStart;
    if (q < 0) return undefined;
    let shift = 0;
    for (const e of layout.exports) {
      const start = e + shift;
      if (q < start) break;
      if (q < start + EXPORT.length) return e;
      shift += EXPORT.length;
    }
    return q - shift;
  }

  /**
   * Checks a cell and records its declarations for the next cells. Returns its errors, positioned
   * in a source file of the cell alone named `cellName`.
   */
  check(source: string, cellName: string): ts.Diagnostic[] {
    const layout = this.layout(source, true);
    this.update(layout);
    const program = this.service.getProgram()!;
    const file = program.getSourceFile(this.fileName)!;
    const cellFile = ts.createSourceFile(cellName, source, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
    const diagnostics: ts.Diagnostic[] = [];
    for (const d of [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)]) {
      if (d.category !== ts.DiagnosticCategory.Error || d.start === undefined) continue;
      const start = this.toCell(layout, d.start);
      if (start === undefined) continue; // in the prelude: an old cell's problem, reported then
      diagnostics.push({ ...d, file: cellFile, start, relatedInformation: undefined });
    }
    const dts = this.service.getEmitOutput(this.fileName, true).outputFiles.find((f) => f.name.endsWith(".d.ts"));
    this.scope.record(cellFile, dts?.text ?? "");
    return diagnostics;
  }

  /** Completions at a cell offset: the names that start with the identifier before the cursor. */
  complete(source: string, offset: number): Completion {
    let start = offset;
    while (start > 0 && /[\w$]/.test(source[start - 1])) start--;
    const prefix = source.slice(start, offset);
    const layout = this.layout(source, false);
    this.update(layout);
    const info = this.service.getCompletionsAtPosition(this.fileName, layout.cellStart + offset, {});
    const entries = (info?.entries ?? []).filter((e) => e.name.startsWith(prefix));
    entries.sort((a, b) => a.sortText.localeCompare(b.sortText) || a.name.localeCompare(b.name));
    return { matches: [...new Set(entries.map((e) => e.name))], start, end: offset };
  }

  /** What the language service knows about the symbol at (or just before) a cell offset. */
  inspect(source: string, offset: number): string | undefined {
    const layout = this.layout(source, false);
    this.update(layout);
    for (const at of [offset, offset - 1]) {
      if (at < 0) continue;
      const info = this.service.getQuickInfoAtPosition(this.fileName, layout.cellStart + at);
      if (!info) continue;
      const doc = ts.displayPartsToString(info.documentation);
      const tags = (info.tags ?? []).map((t) => `@${t.name} ${ts.displayPartsToString(t.text)}`.trim());
      return [ts.displayPartsToString(info.displayParts), doc, ...tags].filter((s) => s !== "").join("\n\n");
    }
    return undefined;
  }
}

function needsExport(s: ts.Statement): boolean {
  const exported = ts.canHaveModifiers(s) && (ts.getModifiers(s) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
  if (exported) return false;
  if (ts.isVariableStatement(s)) {
    const kind = s.declarationList.flags & ts.NodeFlags.BlockScoped;
    return kind !== ts.NodeFlags.Using && kind !== ts.NodeFlags.AwaitUsing;
  }
  if (ts.isModuleDeclaration(s)) return ts.isIdentifier(s.name) && !(s.flags & ts.NodeFlags.GlobalAugmentation);
  return (
    ((ts.isFunctionDeclaration(s) || ts.isClassDeclaration(s)) && s.name !== undefined) ||
    ts.isInterfaceDeclaration(s) ||
    ts.isTypeAliasDeclaration(s) ||
    ts.isEnumDeclaration(s)
  );
}
