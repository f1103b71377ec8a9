// Executes TypeScript cells: compile (syntax errors stop the cell), type-check (errors are shown
// but, by default, do not stop it), run, and report values or errors.
//
// Why type errors do not block by default: notebook code is exploratory and a checker is stricter
// than the runtime (a value typed too narrowly, a library without types); refusing to run such a
// cell makes notebooks painful (tslab's behaviour). The errors still appear, in the compiler's own
// format, on the cell's stderr before its output. MOELENS_KERNEL_TYPECHECK=block restores the
// strict behaviour, =off skips checking.
import * as path from "node:path";
import * as vm from "node:vm";
import * as ts from "typescript";
import { CELL_GLOBALS } from "./cell-api";
import { CellRunner, KernelInterrupt } from "./cell-runner";
import { KERNEL_MODULES } from "./kernel-modules";
import { CellSyntaxError, compileCell, type CompiledCell } from "./cell-transform";
import { isComplete, type Completeness } from "./is-complete";
import { formatDiagnostics, reportDiagnostics, reportError, type ErrorReport } from "./traceback";
import { CellTypeChecker, type Completion } from "./type-checker";

export type TypeCheckMode = "warn" | "block" | "off";
export const TYPECHECK_MODES: readonly TypeCheckMode[] = ["warn", "block", "off"];

export interface ExecutorOptions {
  /** The notebook's folder (where relative imports and node_modules resolve from). */
  cwd: string;
  typecheck: TypeCheckMode;
  /** Receives type errors in "warn" mode, formatted for a terminal (ANSI colors). */
  onTypeErrors: (text: string) => void;
  /**
   * Called before the cell's code starts: a synchronous cell (`while (true) {}`) blocks the event
   * loop, so whatever must reach the client first (its input, type errors) is sent now.
   */
  beforeRun?: () => Promise<void>;
}

export type Outcome = { status: "ok"; value: unknown; hasValue: boolean } | { status: "error"; report: ErrorReport };

const CELL_API = path.join(__dirname, "cell-api");

export class Executor {
  private readonly runner: CellRunner;
  private checker: CellTypeChecker | undefined;
  /** A cell is being compiled and checked; an interrupt now cancels it before it runs. */
  private preparing = false;
  private interruptedWhilePreparing = false;

  constructor(private readonly options: ExecutorOptions) {
    this.runner = new CellRunner(options.cwd, KERNEL_MODULES);
    Object.assign(globalThis, CELL_GLOBALS);
  }

  private typeChecker(): CellTypeChecker {
    this.checker ??= new CellTypeChecker({
      cwd: this.options.cwd,
      modules: KERNEL_MODULES,
      globals: Object.fromEntries(
        Object.keys(CELL_GLOBALS).map((name) => [name, `declare const ${name}: typeof import(${JSON.stringify(CELL_API)}).${name};`]),
      ),
    });
    return this.checker;
  }

  /** Loads the compiler's view of lib and package types now rather than at the first cell. */
  warmUp(): void {
    if (this.options.typecheck !== "off") this.typeChecker().complete("", 0);
  }

  async execute(code: string, fileName: string): Promise<Outcome> {
    this.preparing = true;
    this.interruptedWhilePreparing = false;
    try {
      const prepared = this.prepare(code, fileName);
      if ("status" in prepared) return prepared;
      await this.options.beforeRun?.();
      // A SIGINT that arrived while the cell was checked is handled in this turn of the event loop.
      await new Promise((resolve) => setImmediate(resolve));
      if (this.interruptedWhilePreparing) return { status: "error", report: this.describeError(new KernelInterrupt()) };
      this.preparing = false;
      return await this.run(prepared);
    } finally {
      this.preparing = false;
    }
  }

  private prepare(code: string, fileName: string): CompiledCell | Outcome {
    let cell;
    try {
      cell = compileCell(code, fileName);
    } catch (e) {
      if (!(e instanceof CellSyntaxError)) throw e;
      const file = ts.createSourceFile(fileName, code, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
      return { status: "error", report: reportDiagnostics("SyntaxError", e.diagnostics.map((d) => ({ ...d, file }))) };
    }
    if (this.options.typecheck !== "off") {
      const errors = this.typeChecker().check(code, fileName);
      if (errors.length > 0 && this.options.typecheck === "block") {
        return { status: "error", report: reportDiagnostics("TSError", errors) };
      }
      if (errors.length > 0) this.options.onTypeErrors(formatDiagnostics(errors));
    }
    return cell;
  }

  private async run(cell: CompiledCell): Promise<Outcome> {
    let outcome: Outcome;
    try {
      outcome = { status: "ok", value: await this.runner.run(cell), hasValue: cell.hasValue };
    } catch (e) {
      outcome = { status: "error", report: this.describeError(e) };
    }
    // Node reports promises the cell left rejected after the current turn: let that happen while
    // the cell is still the one running, so the report shows under it.
    await new Promise((resolve) => setImmediate(resolve));
    return outcome;
  }

  /** An error report whose stack frames point into the cells that ran. */
  describeError(error: unknown): ErrorReport {
    return reportError(error, (fileName) => this.runner.cell(fileName));
  }

  /** Evaluates an expression synchronously, for user_expressions (no await, no declarations). */
  evaluate(expression: string): unknown {
    const js = ts.transpileModule(`(${expression})`, { compilerOptions: { target: ts.ScriptTarget.ES2022 } }).outputText;
    return vm.runInThisContext(js, { filename: "user_expression" });
  }

  /** Abandons the running cell, or cancels the one being prepared (it fails with KernelInterrupt); false if none. */
  interrupt(): boolean {
    if (this.preparing) {
      this.interruptedWhilePreparing = true;
      return true;
    }
    return this.runner.interrupt();
  }

  complete(code: string, offset: number): Completion {
    return this.typeChecker().complete(code, offset);
  }

  inspect(code: string, offset: number): string | undefined {
    return this.typeChecker().inspect(code, offset);
  }

  isComplete(code: string): Completeness {
    return isComplete(code);
  }
}
