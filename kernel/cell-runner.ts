// Runs compiled cells in the kernel's own global context (so SDK objects, typed arrays and
// `instanceof` behave as in any Node program) and lets an interrupt abandon the running cell.
import { createRequire, isBuiltin, Module } from "node:module";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import * as util from "node:util";
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

// Node's own `import()`. TypeScript turns `import()` into `require` in this CommonJS build, and code
// made by `new Function` or `vm` has no module loader; a module compiled by Node's loader has one.
const hostImport = (() => {
  const m = new Module(__filename) as Module & { _compile(code: string, filename: string): void };
  m._compile("module.exports = (specifier, options) => import(specifier, options);", __filename);
  return m.exports as (specifier: string, options?: ImportCallOptions) => Promise<unknown>;
})();

// require() cannot load these; import() can (an ES module with top-level await, or one whose
// package exports it to `import` only).
const NEEDS_IMPORT = new Set(["ERR_REQUIRE_ESM", "ERR_REQUIRE_ASYNC_MODULE", "ERR_PACKAGE_PATH_NOT_EXPORTED"]);

// import() of a CommonJS module as Node gives it: the exports as `default`, and each export by name.
function namespaceOf(exports: unknown): unknown {
  if (util.types.isModuleNamespaceObject(exports)) return exports; // require() of an ES module
  const names = typeof exports === "object" || typeof exports === "function" ? Object.keys(exports as object) : [];
  const namespace: Record<string, unknown> = Object.create(null);
  for (const name of names) namespace[name] = (exports as Record<string, unknown>)[name];
  namespace.default = exports;
  return Object.freeze(namespace);
}

export class CellRunner {
  private readonly cells = new Map<string, CompiledCell>();
  private abandon: ((error: Error) => void) | undefined;

  /** `modules`: what those names mean in cells (KERNEL_MODULES); other modules resolve from `cwd`. */
  constructor(cwd: string, modules: Readonly<Record<string, string>>) {
    const base = createRequire(path.join(cwd, "__moelens_cell__.js"));
    const target = (id: string) => modules[id] ?? id;
    const cellRequire = Object.assign((id: string) => base(target(id)), {
      resolve: Object.assign((id: string, options?: { paths?: string[] }) => base.resolve(target(id), options), {
        paths: base.resolve.paths,
      }),
      cache: base.cache,
      extensions: base.extensions,
      main: base.main,
    }) as NodeRequire;
    // `import()` in a cell: as `require` (the same module instances as static imports), else
    // Node's own import() with the specifier resolved from the notebook's folder.
    const importModule = async (specifier: string, options?: ImportCallOptions): Promise<unknown> => {
      if (!/^[a-z][a-z0-9+.-]*:/i.test(specifier) || specifier.startsWith("node:")) {
        try {
          return namespaceOf(cellRequire(specifier));
        } catch (e) {
          if (!NEEDS_IMPORT.has((e as { code?: string }).code ?? "")) throw e;
        }
      }
      const url = isBuiltin(specifier) ? specifier : await resolveFrom(cwd, specifier);
      return hostImport(url, options);
    };
    const context: CellContext = { g: globalThis, require: cellRequire, importDefault, importModule };
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

// Node's ES module resolution from the notebook's folder (import-meta-resolve, an ES module itself).
let esmResolve: ((specifier: string, parent: string) => string) | undefined;
async function resolveFrom(cwd: string, specifier: string): Promise<string> {
  esmResolve ??= ((await hostImport(pathToFileURL(require.resolve("import-meta-resolve")).href)) as typeof import("import-meta-resolve")).resolve;
  return esmResolve(specifier, pathToFileURL(path.join(cwd, "/")).href);
}
