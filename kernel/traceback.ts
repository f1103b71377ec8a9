// Error reports for Jupyter (`ename`, `evalue`, `traceback`): stack frames inside cells point at the
// cell's TypeScript lines, the kernel's own frames are dropped, and the failing line is quoted.
import * as path from "node:path";
import * as ts from "typescript";
import type { CompiledCell } from "./cell-transform";
import { plainText } from "./mime";

export interface ErrorReport {
  ename: string;
  evalue: string;
  traceback: string[];
}

const RED = "\x1b[31m";
const BOLD_RED = "\x1b[1;31m";
const CYAN = "\x1b[36m";
const RESET = "\x1b[0m";
const KERNEL_DIR = __dirname + path.sep;

// "    at f (cell[3]:2:5)" or "    at async cell[3]:4:1"
const CELL_FRAME = /(cell\[[^\]\s]+\]):(\d+):(\d+)/;

function quote(cell: CompiledCell, line: number, column: number): string[] {
  const text = cell.source.split("\n")[line] ?? "";
  return [`${CYAN}${cell.fileName}:${line + 1}${RESET}`, `  ${text}`, `  ${" ".repeat(column)}${RED}^${RESET}`];
}

function frames(stack: string, cells: (fileName: string) => CompiledCell | undefined): { lines: string[]; first?: string[] } {
  const lines: string[] = [];
  let first: string[] | undefined;
  let lastCell = -1;
  for (const raw of stack.split("\n")) {
    if (!/^\s+at /.test(raw)) continue;
    const m = CELL_FRAME.exec(raw);
    const cell = m && cells(m[1]);
    if (m && cell) {
      const at = cell.toSource(Number(m[2]), Number(m[3]));
      if (!at) continue; // the code that wraps and calls the cell
      lines.push(raw.replace(CELL_FRAME, `${cell.fileName}:${at.line + 1}:${at.column + 1}`));
      first ??= quote(cell, at.line, at.column);
      lastCell = lines.length;
    } else if (!raw.includes(KERNEL_DIR) && !raw.includes("node:vm") && !raw.includes("node:internal/vm")) {
      lines.push(raw);
    }
  }
  // Below the last cell frame there is only the machinery that ran the cell.
  return { lines: lastCell >= 0 ? lines.slice(0, lastCell) : lines, first };
}

/** Describes anything a cell threw. `cells` finds a compiled cell by its file name. */
export function reportError(error: unknown, cells: (fileName: string) => CompiledCell | undefined): ErrorReport {
  if (!(error instanceof Error)) {
    const evalue = plainText(error);
    return { ename: "Thrown", evalue, traceback: [`${BOLD_RED}Uncaught${RESET} ${evalue}`] };
  }
  const ename = error.name || error.constructor?.name || "Error";
  const evalue = error.message;
  const traceback = [`${BOLD_RED}${ename}${RESET}: ${evalue}`];
  const stack = typeof error.stack === "string" ? frames(error.stack, cells) : { lines: [] };
  traceback.push(...stack.lines);
  if (stack.first) traceback.push("", ...stack.first);
  for (let cause = error.cause, depth = 0; cause !== undefined && depth < 5; depth++) {
    const c = cause instanceof Error ? `${cause.name}: ${cause.message}` : plainText(cause);
    traceback.push(`${RED}Caused by${RESET} ${c}`);
    cause = cause instanceof Error ? cause.cause : undefined;
  }
  return { ename, evalue, traceback };
}

const FORMAT_HOST: ts.FormatDiagnosticsHost = {
  getCurrentDirectory: () => "",
  getCanonicalFileName: (f) => f,
  getNewLine: () => "\n",
};

/** Compiler diagnostics as the compiler prints them: position, message, the line and a squiggle. */
export function formatDiagnostics(diagnostics: readonly ts.Diagnostic[]): string {
  return ts.formatDiagnosticsWithColorAndContext(diagnostics, FORMAT_HOST);
}

/** A cell that does not compile, as an error report. */
export function reportDiagnostics(ename: string, diagnostics: readonly ts.Diagnostic[]): ErrorReport {
  const evalue = ts.flattenDiagnosticMessageText(diagnostics[0].messageText, "\n");
  return { ename, evalue, traceback: formatDiagnostics(diagnostics).trimEnd().split("\n") };
}
