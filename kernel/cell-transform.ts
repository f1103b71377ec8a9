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

export function compileCell(source: string, fileName: string): CompiledCell {
  const out = ts.transpileModule(source, {
    compilerOptions: TRANSPILE_OPTIONS,
    fileName: "cell.ts",
    reportDiagnostics: true,
  });
  if (out.diagnostics && out.diagnostics.length > 0) throw new CellSyntaxError(out.diagnostics, fileName);
  const js = out.outputText.replace(/\n\/\/# sourceMappingURL=.*\s*$/, "\n");
  const map = new SourceMap(out.sourceMapText!);
  const jsFile = ts.createSourceFile("cell.js", js, ts.ScriptTarget.ES2022, true, ts.ScriptKind.JS);
  const edits = new EditList(jsFile);
  const hoisted = new Set<string>();
  const functions: string[] = [];

  const stripExport = (node: ts.Node) => {
    for (const m of ts.canHaveModifiers(node) ? (ts.getModifiers(node) ?? []) : []) {
      if (m.kind === ts.SyntaxKind.DefaultKeyword) unsupported(jsFile, node, fileName, "`export default`");
      if (m.kind === ts.SyntaxKind.ExportKeyword) edits.replace(m, "");
    }
  };

  let last: ts.Statement | undefined;
  for (const s of jsFile.statements) {
    last = s;
    if (ts.isImportDeclaration(s)) {
      const from = `require(${s.moduleSpecifier.getText(jsFile)})`;
      const parts: string[] = [];
      const clause = s.importClause;
      if (clause?.name) {
        hoisted.add(clause.name.text);
        parts.push(`${clause.name.text} = ${CONTEXT_PARAM}.importDefault(${from})`);
      }
      const bindings = clause?.namedBindings;
      if (bindings && ts.isNamespaceImport(bindings)) {
        hoisted.add(bindings.name.text);
        parts.push(`${bindings.name.text} = ${from}`);
      } else if (bindings) {
        const fields = bindings.elements.map((e) => {
          hoisted.add(e.name.text);
          return `${(e.propertyName ?? e.name).getText(jsFile)}: ${e.name.text}`;
        });
        parts.push(`({ ${fields.join(", ")} } = ${from})`);
      }
      if (parts.length === 0) parts.push(from);
      edits.replace(s, `;${parts.join(", ")};${newlines(s.getText(jsFile))}`);
    } else if (ts.isExportDeclaration(s)) {
      const empty = !s.moduleSpecifier && s.exportClause && ts.isNamedExports(s.exportClause) && s.exportClause.elements.length === 0;
      if (!empty) unsupported(jsFile, s, fileName, "`export`");
      edits.replace(s, "");
      if (last === s) last = undefined;
    } else if (ts.isExportAssignment(s)) {
      unsupported(jsFile, s, fileName, "`export default`");
    } else if (ts.isVariableStatement(s)) {
      stripExport(s);
      const list = s.declarationList;
      const kind = list.flags & ts.NodeFlags.BlockScoped;
      // `using` disposes at the end of the cell, so it stays local to it.
      if (kind === ts.NodeFlags.Using || kind === ts.NodeFlags.AwaitUsing) continue;
      const keyword = list.getStart(jsFile);
      const isLet = kind === ts.NodeFlags.Let;
      const keywordLength = kind === ts.NodeFlags.Const ? 5 : 3;
      edits.replace({ start: keyword, end: keyword + keywordLength }, ";(");
      for (const d of list.declarations) {
        bindingNames(d.name).forEach((n) => hoisted.add(n));
        // `let x;` run again must reset x, as a fresh declaration would.
        if (!d.initializer && isLet) edits.insert(d.end, " = void 0");
      }
      edits.insert(list.end, ")");
    } else if (ts.isFunctionDeclaration(s) && s.name) {
      stripExport(s);
      hoisted.add(s.name.text);
      functions.push(s.name.text);
    } else if (ts.isClassDeclaration(s) && s.name) {
      stripExport(s);
      hoisted.add(s.name.text);
      edits.insert(s.end, `;${CONTEXT_PARAM}.g.${s.name.text} = ${s.name.text};`);
    } else {
      stripExport(s);
    }
  }

  const jsStarts = lineStarts(js);
  const hasValue = last !== undefined && ts.isExpressionStatement(last) && lastIsExpression(source, map, jsStarts, last, jsFile);
  if (hasValue) {
    const e = (last as ts.ExpressionStatement).expression;
    edits.insert(e.getStart(jsFile), "return (");
    edits.insert(e.end, ")");
  }

  // `import(...)` anywhere in the cell goes through the kernel: vm scripts have no loader of their own.
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      edits.replace(node.expression, `${CONTEXT_PARAM}.importModule`);
    }
    ts.forEachChild(node, visit);
  };
  visit(jsFile); // after the `return (` insert, which must come first at a shared offset

  const context = `globalThis[Symbol.for("moelens.cell")]`;
  const prefix =
    (hoisted.size > 0 ? `var ${[...hoisted].join(", ")}; ` : "") +
    `(async (${CONTEXT_PARAM}, require) => { "use strict"; ` +
    functions.map((f) => `${CONTEXT_PARAM}.g.${f} = ${f}; `).join("");
  edits.edits.unshift({ start: 0, end: 0, text: prefix }); // before any other edit at offset 0
  edits.insert(js.length, `\n})(${context}, ${context}.require)`);

  const sorted = edits.edits.map((e, i) => ({ ...e, i })).sort((a, b) => a.start - b.start || a.i - b.i);
  let script = "";
  let at = 0;
  for (const e of sorted) {
    script += js.slice(at, e.start) + e.text;
    at = Math.max(at, e.end);
  }
  script += js.slice(at);

  const scriptStarts = lineStarts(script);
  const sourceStarts = lineStarts(source);
  const toJsOffset = (offset: number): number => {
    let delta = 0;
    for (const e of sorted) {
      const finalStart = e.start + delta;
      if (offset < finalStart) break;
      if (offset < finalStart + e.text.length) return e.start;
      delta += e.text.length - (e.end - e.start);
    }
    return offset - delta;
  };
  return {
    fileName,
    source,
    script,
    hasValue,
    toSource(line, column) {
      if (line < 1 || line > scriptStarts.length) return undefined;
      const jsOffset = toJsOffset(scriptStarts[line - 1] + column - 1);
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
