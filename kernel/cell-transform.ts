// Turns a TypeScript cell into a script that keeps its top-level declarations for later cells and
// allows top-level `await` and `for await`:
//
//   import { load } from "moelens";        var load, m, f;
//   const m = await load();           ->   (async (__moelensCell, require) => { "use strict"; __moelensCell.g.f = f;
//   function f() {}                          ;({ load: load } = require("moelens"));
//   m.config                                 ;( m = await load());
//                                            function f() {}
//                                            return (m.config);
//                                          })(...)
//
// Declarations become assignments to global `var`s (as Node's REPL does for `await`), so a later cell
// can redeclare them; functions and classes stay in place (hoisting, TDZ) and are copied to the
// global object. The TypeScript is first compiled by `ts.transpileModule`; every edit is recorded
// so that stack positions map back to the cell's own lines through the source map.
import * as ts from "typescript";
import { bindingNames } from "./cell-scope";
import { SourceMap, type Position } from "./source-map";

/** globalThis[CELL_CONTEXT] is what compiled cells receive as their first argument. */
export const CELL_CONTEXT = Symbol.for("moelens.cell");
const CONTEXT_PARAM = "__moelensCell";

export interface CellContext {
  /** The global object, where declarations live. */
  g: typeof globalThis;
  /** `require` for cells: "moelens" is this package, anything else resolves from the notebook's folder. */
  require: NodeRequire;
  /** `import x from "m"` with esModuleInterop semantics. */
  importDefault(module: unknown): unknown;
  /** `import(specifier)` in a cell: the same modules as `require`, resolved from the notebook's folder. */
  importModule(specifier: string, options?: ImportCallOptions): Promise<unknown>;
}

export interface CompiledCell {
  /** The name stack traces show, e.g. "cell[3]". */
  fileName: string;
  source: string;
  script: string;
  /** Whether the script returns the value of the cell's last expression. */
  hasValue: boolean;
  /** The cell position (0-based) of a 1-based script line and column, as V8 reports them. */
  toSource(line: number, column: number): Position | undefined;
}

/** The cell does not parse; `diagnostics` say where. */
export class CellSyntaxError extends Error {
  override name = "SyntaxError";
  constructor(
    readonly diagnostics: readonly ts.Diagnostic[],
    readonly fileName: string,
  ) {
    super(ts.flattenDiagnosticMessageText(diagnostics[0].messageText, "\n"));
  }
}

const TRANSPILE_OPTIONS: ts.CompilerOptions = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.ESNext,
  // Keep imports even if this cell only uses them as types: a later cell may use them as values.
  verbatimModuleSyntax: true,
  sourceMap: true,
  useDefineForClassFields: true,
};

interface Edit {
  start: number;
  end: number;
  text: string;
}

function lineStarts(text: string): number[] {
  const starts = [0];
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) === 10) starts.push(i + 1);
  return starts;
}

function positionOf(starts: number[], offset: number): Position {
  let lo = 0;
  let hi = starts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid] <= offset) lo = mid;
    else hi = mid - 1;
  }
  return { line: lo, column: offset - starts[lo] };
}

function newlines(text: string): string {
  return "\n".repeat(text.split("\n").length - 1);
}

class EditList {
  readonly edits: Edit[] = [];
  constructor(private readonly file: ts.SourceFile) {}

  replace(node: ts.Node | { start: number; end: number }, text: string): void {
    const start = "kind" in node ? node.getStart(this.file) : node.start;
    this.edits.push({ start, end: node.end, text });
  }
  insert(at: number, text: string): void {
    this.edits.push({ start: at, end: at, text });
  }
}

function unsupported(file: ts.SourceFile, node: ts.Node, fileName: string, what: string): never {
  const d: ts.Diagnostic = {
    category: ts.DiagnosticCategory.Error,
    code: 0,
    file,
    start: node.getStart(file),
    length: node.getWidth(file),
    messageText: `${what} is not supported in a cell: top-level declarations are shared with later cells already`,
  };
  throw new CellSyntaxError([d], fileName);
}

/** The cell compiled to JavaScript by TypeScript, with the map back to the cell. */
interface Transpiled {
  js: string;
  map: SourceMap;
  jsFile: ts.SourceFile;
}

function transpile(source: string, fileName: string): Transpiled {
  const out = ts.transpileModule(source, {
    compilerOptions: TRANSPILE_OPTIONS,
    fileName: "cell.ts",
    reportDiagnostics: true,
  });
  if (out.diagnostics && out.diagnostics.length > 0) throw new CellSyntaxError(out.diagnostics, fileName);
  const js = out.outputText.replace(/\n\/\/# sourceMappingURL=.*\s*$/, "\n");
  return {
    js,
    map: new SourceMap(out.sourceMapText!),
    jsFile: ts.createSourceFile("cell.js", js, ts.ScriptTarget.ES2022, true, ts.ScriptKind.JS),
  };
}

/**
 * The edits that turn the cell's top-level statements into assignments to shared names: what they
 * declare (`hoisted`), the functions to copy to the global object, and the last statement that
 * emits code (whose value the cell may return).
 */
class TopLevelRewriter {
  readonly hoisted = new Set<string>();
  readonly functions: string[] = [];
  last: ts.Statement | undefined;

  constructor(
    private readonly jsFile: ts.SourceFile,
    private readonly fileName: string,
    private readonly edits: EditList,
  ) {}

  rewrite(): void {
    for (const s of this.jsFile.statements) {
      this.last = s;
      this.statement(s);
    }
  }

  private statement(s: ts.Statement): void {
    const { jsFile, fileName, edits } = this;
    if (ts.isImportDeclaration(s)) {
      this.importDeclaration(s);
    } else if (ts.isExportDeclaration(s)) {
      const empty = !s.moduleSpecifier && s.exportClause && ts.isNamedExports(s.exportClause) && s.exportClause.elements.length === 0;
      if (!empty) unsupported(jsFile, s, fileName, "`export`");
      edits.replace(s, "");
      if (this.last === s) this.last = undefined;
    } else if (ts.isExportAssignment(s)) {
      unsupported(jsFile, s, fileName, "`export default`");
    } else if (ts.isVariableStatement(s)) {
      this.stripExport(s);
      this.variableStatement(s);
    } else if (ts.isFunctionDeclaration(s) && s.name) {
      this.stripExport(s);
      this.hoisted.add(s.name.text);
      this.functions.push(s.name.text);
    } else if (ts.isClassDeclaration(s) && s.name) {
      this.stripExport(s);
      this.hoisted.add(s.name.text);
      edits.insert(s.end, `;${CONTEXT_PARAM}.g.${s.name.text} = ${s.name.text};`);
    } else {
      this.stripExport(s);
    }
  }

  private stripExport(node: ts.Node): void {
    for (const m of ts.canHaveModifiers(node) ? (ts.getModifiers(node) ?? []) : []) {
      if (m.kind === ts.SyntaxKind.DefaultKeyword) unsupported(this.jsFile, node, this.fileName, "`export default`");
      if (m.kind === ts.SyntaxKind.ExportKeyword) this.edits.replace(m, "");
    }
  }

  // `import { a as b } from "m"` -> `;({ a: b } = require("m"));`, on the import's own lines.
  private importDeclaration(s: ts.ImportDeclaration): void {
    const jsFile = this.jsFile;
    const from = `require(${s.moduleSpecifier.getText(jsFile)})`;
    const parts: string[] = [];
    const clause = s.importClause;
    if (clause?.name) {
      this.hoisted.add(clause.name.text);
      parts.push(`${clause.name.text} = ${CONTEXT_PARAM}.importDefault(${from})`);
    }
    const bindings = clause?.namedBindings;
    if (bindings && ts.isNamespaceImport(bindings)) {
      this.hoisted.add(bindings.name.text);
      parts.push(`${bindings.name.text} = ${from}`);
    } else if (bindings) {
      const fields = bindings.elements.map((e) => {
        this.hoisted.add(e.name.text);
        return `${(e.propertyName ?? e.name).getText(jsFile)}: ${e.name.text}`;
      });
      parts.push(`({ ${fields.join(", ")} } = ${from})`);
    }
    if (parts.length === 0) parts.push(from);
    this.edits.replace(s, `;${parts.join(", ")};${newlines(s.getText(jsFile))}`);
  }

  // `const a = 1, b = 2` -> `;( a = 1, b = 2)`.
  private variableStatement(s: ts.VariableStatement): void {
    const list = s.declarationList;
    const kind = list.flags & ts.NodeFlags.BlockScoped;
    // `using` disposes at the end of the cell, so it stays local to it.
    if (kind === ts.NodeFlags.Using || kind === ts.NodeFlags.AwaitUsing) return;
    const keyword = list.getStart(this.jsFile);
    const isLet = kind === ts.NodeFlags.Let;
    const keywordLength = kind === ts.NodeFlags.Const ? 5 : 3;
    this.edits.replace({ start: keyword, end: keyword + keywordLength }, ";(");
    for (const d of list.declarations) {
      bindingNames(d.name).forEach((n) => this.hoisted.add(n));
      // `let x;` run again must reset x, as a fresh declaration would.
      if (!d.initializer && isLet) this.edits.insert(d.end, " = void 0");
    }
    this.edits.insert(list.end, ")");
  }
}

/** `import(...)` anywhere in the cell goes through the kernel: vm scripts have no loader of their own. */
function routeDynamicImports(jsFile: ts.SourceFile, edits: EditList): void {
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      edits.replace(node.expression, `${CONTEXT_PARAM}.importModule`);
    }
    ts.forEachChild(node, visit);
  };
  visit(jsFile);
}

/** Wraps the script in the async function that receives the cell context, after the shared `var`s. */
function wrapInAsyncFunction(js: string, edits: EditList, hoisted: Set<string>, functions: string[]): void {
  const context = `globalThis[Symbol.for("moelens.cell")]`;
  const prefix =
    (hoisted.size > 0 ? `var ${[...hoisted].join(", ")}; ` : "") +
    `(async (${CONTEXT_PARAM}, require) => { "use strict"; ` +
    functions.map((f) => `${CONTEXT_PARAM}.g.${f} = ${f}; `).join("");
  edits.edits.unshift({ start: 0, end: 0, text: prefix }); // before any other edit at offset 0
  edits.insert(js.length, `\n})(${context}, ${context}.require)`);
}

/** The edited text, and the edits in the order applied (by offset, then by the order they were made). */
function applyEdits(js: string, edits: readonly Edit[]): { script: string; applied: Edit[] } {
  const applied = edits.map((e, i) => ({ ...e, i })).sort((a, b) => a.start - b.start || a.i - b.i);
  let script = "";
  let at = 0;
  for (const e of applied) {
    script += js.slice(at, e.start) + e.text;
    at = Math.max(at, e.end);
  }
  script += js.slice(at);
  return { script, applied };
}

/** Maps an offset in the edited script back to the JavaScript: text an edit inserted maps to its start. */
function scriptToJsOffset(applied: readonly Edit[], offset: number): number {
  let delta = 0;
  for (const e of applied) {
    const finalStart = e.start + delta;
    if (offset < finalStart) break;
    if (offset < finalStart + e.text.length) return e.start;
    delta += e.text.length - (e.end - e.start);
  }
  return offset - delta;
}

export function compileCell(source: string, fileName: string): CompiledCell {
  const { js, map, jsFile } = transpile(source, fileName);
  const edits = new EditList(jsFile);
  const rewriter = new TopLevelRewriter(jsFile, fileName, edits);
  rewriter.rewrite();

  const jsStarts = lineStarts(js);
  const last = rewriter.last;
  const hasValue = last !== undefined && ts.isExpressionStatement(last) && lastIsExpression(source, map, jsStarts, last, jsFile);
  if (hasValue) {
    const e = (last as ts.ExpressionStatement).expression;
    edits.insert(e.getStart(jsFile), "return (");
    edits.insert(e.end, ")");
  }
  routeDynamicImports(jsFile, edits); // after the `return (` insert, which must come first at a shared offset
  wrapInAsyncFunction(js, edits, rewriter.hoisted, rewriter.functions);
  const { script, applied } = applyEdits(js, edits.edits);

  const scriptStarts = lineStarts(script);
  const sourceStarts = lineStarts(source);
  return {
    fileName,
    source,
    script,
    hasValue,
    toSource(line, column) {
      if (line < 1 || line > scriptStarts.length) return undefined;
      const jsOffset = scriptToJsOffset(applied, scriptStarts[line - 1] + column - 1);
      const original = map.original(positionOf(jsStarts, Math.min(jsOffset, js.length)));
      if (!original || original.line >= sourceStarts.length) return undefined;
      return original;
    },
  };
}

// The value is shown only if the cell's own last statement is an expression (the last emitted one
// may come from an earlier line when trailing TypeScript-only statements emit nothing).
function lastIsExpression(source: string, map: SourceMap, jsStarts: number[], last: ts.Statement, jsFile: ts.SourceFile): boolean {
  const tsFile = ts.createSourceFile("cell.ts", source, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const tsLast = tsFile.statements[tsFile.statements.length - 1];
  if (!tsLast || !ts.isExpressionStatement(tsLast)) return false;
  const at = map.original(positionOf(jsStarts, last.getStart(jsFile)));
  if (!at) return false;
  const offset = ts.getPositionOfLineAndCharacter(tsFile, at.line, 0) + at.column;
  return offset >= tsLast.getStart(tsFile) && offset <= tsLast.end;
}
