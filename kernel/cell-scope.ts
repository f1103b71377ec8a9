// What earlier cells declared, as TypeScript text the type checker puts before the next cell:
// imports (one per local name) and ambient declarations (`declare const model: Model;`) taken from
// the declaration file TypeScript emits for each cell. A name declared again replaces the old entry,
// so re-running or editing a cell never conflicts with its previous version.
import * as ts from "typescript";

interface Entry {
  kind: "import" | "declaration";
  text: string;
}

function importText(decl: ts.ImportDeclaration, file: ts.SourceFile): Map<string, string> {
  const out = new Map<string, string>();
  const clause = decl.importClause;
  if (!clause) return out;
  const from = decl.moduleSpecifier.getText(file);
  const typeOnly = clause.isTypeOnly ? "type " : "";
  if (clause.name) out.set(clause.name.text, `import ${typeOnly}${clause.name.text} from ${from};`);
  const bindings = clause.namedBindings;
  if (bindings && ts.isNamespaceImport(bindings)) {
    out.set(bindings.name.text, `import ${typeOnly}* as ${bindings.name.text} from ${from};`);
  } else if (bindings) {
    for (const e of bindings.elements) {
      const type = clause.isTypeOnly || e.isTypeOnly ? "type " : "";
      const spec = e.propertyName ? `${e.propertyName.getText(file)} as ${e.name.text}` : e.name.text;
      out.set(e.name.text, `import ${type}{ ${spec} } from ${from};`);
    }
  }
  return out;
}

/** The identifiers a binding (`x`, `{ a, b: [c] }`) declares. */
export function bindingNames(name: ts.BindingName): string[] {
  if (ts.isIdentifier(name)) return [name.text];
  return name.elements.flatMap((e) => (ts.isOmittedExpression(e) ? [] : bindingNames(e.name)));
}

/** The names a top-level statement declares (values, types, namespaces). */
export function declaredNames(s: ts.Statement): string[] {
  if (ts.isVariableStatement(s)) return s.declarationList.declarations.flatMap((d) => bindingNames(d.name));
  if (ts.isImportDeclaration(s)) {
    const clause = s.importClause;
    const names = clause?.name ? [clause.name.text] : [];
    const b = clause?.namedBindings;
    if (b && ts.isNamespaceImport(b)) names.push(b.name.text);
    else if (b) names.push(...b.elements.map((e) => e.name.text));
    return names;
  }
  if (
    (ts.isFunctionDeclaration(s) ||
      ts.isClassDeclaration(s) ||
      ts.isInterfaceDeclaration(s) ||
      ts.isTypeAliasDeclaration(s) ||
      ts.isEnumDeclaration(s) ||
      ts.isModuleDeclaration(s)) &&
    s.name &&
    ts.isIdentifier(s.name)
  ) {
    return [s.name.text];
  }
  return [];
}

export class CellScope {
  private readonly entries = new Map<string, Entry>();

  /** Adds a declaration that cells see unless they declare the same name (e.g. `display`). */
  define(name: string, text: string): void {
    this.entries.set(name, { kind: "declaration", text });
  }

  /** The text before a cell that declares `own`: every entry it does not redeclare, imports first. */
  prelude(own: ReadonlySet<string>): string {
    const kept = [...this.entries].filter(([name]) => !own.has(name)).map(([, e]) => e);
    return [...kept.filter((e) => e.kind === "import"), ...kept.filter((e) => e.kind === "declaration")]
      .map((e) => e.text)
      .join("\n");
  }

  /** Records a cell: its own imports, then what its declaration file (`dts`) says it declared. */
  record(cell: ts.SourceFile, dts: string): void {
    for (const s of cell.statements) {
      if (ts.isImportDeclaration(s)) for (const [name, text] of importText(s, cell)) this.entries.set(name, { kind: "import", text });
    }
    const file = ts.createSourceFile("cell.d.ts", dts, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
    const declarations = new Map<string, string[]>();
    for (const s of file.statements) {
      if (ts.isImportDeclaration(s)) {
        for (const [name, text] of importText(s, file)) this.entries.set(name, { kind: "import", text });
      } else if (ts.isVariableStatement(s)) {
        const kind = s.declarationList.flags & ts.NodeFlags.Const ? "const" : s.declarationList.flags & ts.NodeFlags.Let ? "let" : "var";
        for (const d of s.declarationList.declarations) {
          const text = `declare ${kind} ${d.getText(file)};`;
          for (const name of bindingNames(d.name)) declarations.set(name, [...(declarations.get(name) ?? []), text]);
        }
      } else {
        const text = s.getText(file).replace(/^export\s+(?!default\b)/, "");
        for (const name of declaredNames(s)) declarations.set(name, [...(declarations.get(name) ?? []), text]);
      }
    }
    for (const [name, texts] of declarations) this.entries.set(name, { kind: "declaration", text: texts.join("\n") });
  }
}
