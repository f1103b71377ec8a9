// Runs compiled cells in the kernel's own global context (so SDK objects, typed arrays and
// `instanceof` behave as in any Node program) and lets an interrupt abandon the running cell.
import { createRequire } from "node:module";
import * as path from "node:path";
import * as vm from "node:vm";
import { CELL_CONTEXT, type CellContext, type CompiledCell } from "./cell-transform";

/** What an interrupted cell fails with. */
export class KernelInterrupt extends Error {
  override name = "KernelInterrupt";
  constructor() {
    super("interrupted by the user");
    this.stack = `${this.name}: ${this.message}`; // where the kernel noticed is of no interest
  }
}

function importDefault(module: unknown): unknown {
  const m = module as { __esModule?: boolean; default?: unknown } | null;
  return m && m.__esModule ? m.default : module;
}

export class CellRunner {
  private readonly cells = new Map<string, CompiledCell>();
  private abandon: ((error: Error) => void) | undefined;

  /** `sdkEntry`: the module "moelens" means in cells; other modules resolve from `cwd`. */
  constructor(cwd: string, sdkEntry: string) {
    const base = createRequire(path.join(cwd, "__moelens_cell__.js"));
    const target = (id: string) => (id === "moelens" ? sdkEntry : id);
    const cellRequire = Object.assign((id: string) => base(target(id)), {
      resolve: Object.assign((id: string, options?: { paths?: string[] }) => base.resolve(target(id), options), {
        paths: base.resolve.paths,
      }),
      cache: base.cache,
      extensions: base.extensions,
      main: base.main,
    }) as NodeRequire;
    const context: CellContext = { g: globalThis, require: cellRequire, importDefault };
    (globalThis as Record<symbol, unknown>)[CELL_CONTEXT] = context;
  }

  /** A cell run earlier, by its file name (for tracebacks). */
  cell(fileName: string): CompiledCell | undefined {
    return this.cells.get(fileName);
  }

  /** Runs a cell; resolves with its value (undefined if it has none), rejects with what it threw. */
  async run(cell: CompiledCell): Promise<unknown> {
    this.cells.set(cell.fileName, cell);
    let running: Promise<unknown>;
    try {
      // The synchronous part of the cell runs here; SIGINT stops it (a `while (true) {}`).
      running = vm.runInThisContext(cell.script, {
        filename: cell.fileName,
        breakOnSigint: true,
        importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
      }) as Promise<unknown>;
    } catch (e) {
      if ((e as { code?: string }).code === "ERR_SCRIPT_EXECUTION_INTERRUPTED") throw new KernelInterrupt();
      throw e;
    }
    // Once abandoned, the cell's own later failure concerns nobody.
    running.catch(() => undefined);
    const abandoned = new Promise<never>((_, reject) => (this.abandon = reject));
    try {
      return await Promise.race([running, abandoned]);
    } finally {
      this.abandon = undefined;
    }
  }

  /** Makes the running cell fail now with KernelInterrupt; false if no cell is running. */
  interrupt(): boolean {
    if (!this.abandon) return false;
    this.abandon(new KernelInterrupt());
    return true;
  }
}
