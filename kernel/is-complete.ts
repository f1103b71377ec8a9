// is_complete_request: can the frontend run this code, or should Enter add a line?
import * as ts from "typescript";

export interface Completeness {
  status: "complete" | "incomplete" | "invalid";
  /** For incomplete code: the indentation of the next line. */
  indent?: string;
}

const UNTERMINATED_TEMPLATE = 1160;

export function isComplete(code: string): Completeness {
  const out = ts.transpileModule(code, {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
    reportDiagnostics: true,
  });
  const diagnostics = out.diagnostics ?? [];
  if (diagnostics.length === 0) return { status: "complete" };
  const end = code.trimEnd().length;
  // The parser ran out of input (an open block, call, comment or template): more lines may follow.
  const atEnd = diagnostics.some((d) => (d.start ?? 0) >= end || d.code === UNTERMINATED_TEMPLATE);
  if (!atEnd) return { status: "invalid" };
  const lastLine = code.trimEnd().split("\n").pop() ?? "";
  const indent = /^\s*/.exec(lastLine)![0] + (/[{([]\s*$|=>\s*$/.test(lastLine) ? "  " : "");
  return { status: "incomplete", indent };
}
