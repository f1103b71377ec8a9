// The notebooks in notebooks/, executed by Debian's Jupyter (nbconvert) on the installed moelens
// kernel: no errors and no type errors, the expected rich outputs (Plotly JSON beside its HTML
// fallback, plotly.js shipped once per notebook), and, exported to HTML, every chart drawn offline by
// headless Chromium (driven by playwright-core, which waits for each chart to report that it drew).
// CI installs jupyter and chromium (.ci/run).
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { installKernel, uninstallKernel } from "../kernel/install";
import { JUPYTER, codeCells, joined, jupyterEnv, requireDebianJupyter, run, type Cell, type Output } from "./helpers/jupyter";

const CHROMIUM = "/usr/bin/chromium";
const NOTEBOOKS = path.resolve(__dirname, "..", "notebooks");
const NAMES = ["01-quickstart", "02-expert-routing", "03-deltanet-memory", "04-interventions", "05-lesson-moe-and-deltanet", "06-corpus-routing", "07-hooks"];
const PLOTLY = "application/vnd.plotly.v1+json";
const LIBRARY_MARK = "plotly.js v4.1.1";

/** The most an executed notebook may weigh: plotly.js (compressed) once, plus its figures. */
const MAX_EXECUTED_BYTES = 3_000_000;

/** How long a page may take to draw every chart: plotly.js (4.8 MB) is inflated and run first. */
const DRAW_TIMEOUT_MS = 120_000;

/**
 * How long one notebook's test may wait. Each step of a notebook has its own limit (execution 150 s,
 * HTML export 60 s, opening the page 60 s, drawing 120 s), which names what was slow; a test also waits
 * for the notebooks queued before its own (two run at a time), which takes minutes on a busy machine.
 */
const NOTEBOOK_TEST_MS = 600_000;

/** What a chart's element of the exported page reports (sdk/plot/plotly-html.ts sets the attributes). */
interface Chart {
  drawn: boolean;
  /** Why it could not draw, or null. */
  failed: string | null;
  svg: boolean;
}

interface Executed {
  cells: Cell[];
  /** Size of the executed .ipynb file. */
  bytes: number;
  /** The charts of the notebook exported to HTML, in page order, once each settled or the wait ran out. */
  charts: Chart[];
  /** Uncaught errors of the page's scripts. */
  pageErrors: string[];
}

function requireChromium(): void {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (see .ci/run)`);
}

/** Opens an exported notebook offline and waits until every chart drew or failed (or the wait ran out). */
async function loadCharts(browser: Browser, file: string): Promise<Pick<Executed, "charts" | "pageErrors">> {
  const context = await browser.newContext({ offline: true });
  try {
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    await page.goto(`file://${file}`, { waitUntil: "load", timeout: 60_000 });
    const settled = `[...document.querySelectorAll(".moelens-figure")].every((el) => el.hasAttribute("data-moelens-drawn") || el.hasAttribute("data-moelens-failed"))`;
    // A chart that never settles is named by the test that reads `charts`.
    await page.waitForFunction(settled, null, { timeout: DRAW_TIMEOUT_MS, polling: 250 }).catch(() => undefined);
    const charts = await page.$$eval(".moelens-figure", (els) =>
      els.map((el) => ({ drawn: el.hasAttribute("data-moelens-drawn"), failed: el.getAttribute("data-moelens-failed"), svg: el.querySelector("svg.main-svg") !== null })),
    );
    return { charts, pageErrors };
  } finally {
    await context.close();
  }
}

/** Runs at most n tasks at a time. */
function limit(n: number): <T>(task: () => Promise<T>) => Promise<T> {
  let active = 0;
  const waiting: (() => void)[] = [];
  return async (task) => {
    if (active >= n) await new Promise<void>((resolve) => waiting.push(resolve));
    active++;
    try {
      return await task();
    } finally {
      active--;
      waiting.shift()?.();
    }
  };
}

describe("the notebooks under Jupyter and Chromium", () => {
  let prefix: string;
  let specDir: string;
  let browser: Promise<Browser>;
  const results = new Map<string, Promise<Executed>>();

  // Execute, export to HTML, load in Chromium.
  async function pipeline(name: string, env: NodeJS.ProcessEnv): Promise<Executed> {
    const executed = await run(
      JUPYTER,
      ["nbconvert", "--to", "notebook", "--execute", "--allow-errors", "--ExecutePreprocessor.timeout=120",
       path.join(NOTEBOOKS, `${name}.ipynb`), "--output-dir", prefix, "--output", name],
      env, 150_000, prefix,
    );
    if (executed.status !== 0) throw new Error(`nbconvert --execute ${name}: ${executed.output.slice(-4000)}`);
    const notebook = path.join(prefix, `${name}.ipynb`);
    const html = await run(JUPYTER, ["nbconvert", "--to", "html", notebook, "--output-dir", prefix, "--output", name], env, 60_000, prefix);
    if (html.status !== 0) throw new Error(`nbconvert --to html ${name}: ${html.output.slice(-4000)}`);
    const { charts, pageErrors } = await loadCharts(await browser, path.join(prefix, `${name}.html`));
    return { cells: codeCells(JSON.parse(fs.readFileSync(notebook, "utf8"))), bytes: fs.statSync(notebook).size, charts, pageErrors };
  }

  beforeAll(() => {
    requireDebianJupyter();
    requireChromium();
    prefix = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-notebooks-"));
    specDir = installKernel({ prefix });
    browser = chromium.launch({
      executablePath: CHROMIUM,
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
    });
    const env = jupyterEnv(prefix);
    // Two at a time, for two cores; each test awaits its own notebook.
    const slot = limit(2);
    for (const name of NAMES) {
      const done = slot(() => pipeline(name, env));
      done.catch(() => undefined); // reported by the test that awaits it
      results.set(name, done);
    }
  });

  afterAll(async () => {
    await Promise.allSettled(results.values());
    await browser?.then((b) => b.close()).catch(() => undefined);
    if (!prefix) return;
    expect(uninstallKernel({ prefix })).toBe(specDir);
    fs.rmSync(prefix, { recursive: true, force: true });
  });

  const outputs = (cells: Cell[]) => cells.flatMap((c) => c.outputs ?? []);
  const figures = (cells: Cell[]) => outputs(cells).filter((o) => o.data?.[PLOTLY] !== undefined);
  const plain = (o: Output | undefined) => String(o?.data?.["text/plain"] ?? "");
  const result = (cell: Cell) => (cell.outputs ?? []).find((o) => o.output_type === "execute_result");

  /** Checks every notebook shares; returns its code cells. */
  async function executedWell(name: string): Promise<Executed> {
    const executed = await results.get(name)!;
    const { cells } = executed;
    expect(cells.map((c) => c.execution_count)).toEqual(cells.map((_, i) => i + 1));
    for (const c of cells) {
      const failed = (c.outputs ?? []).filter((o) => o.output_type === "error" || (o.output_type === "stream" && o.name === "stderr"));
      expect(failed.map((o) => o.traceback?.join("\n") ?? joined(o.text)), joined(c.source)).toEqual([]);
    }
    // MODEL_DIR is the one line to change for another checkpoint.
    expect(joined(cells[0].source)).toMatch(/^const MODEL_DIR: string = embeddedModelDir;$/m);
    // Figures: Plotly JSON with an object title, and the HTML fallback; plotly.js in the first only.
    const figs = figures(cells);
    for (const f of figs) {
      const spec = f.data![PLOTLY] as { data: unknown[]; layout: { title?: { text?: string } } };
      expect(spec.data.length).toBeGreaterThan(0);
      expect(typeof spec.layout.title?.text).toBe("string");
      expect(String(f.data!["text/html"])).toContain('<div id="moelens-figure-');
    }
    const carriers = figs.filter((f) => String(f.data!["text/html"]).includes(LIBRARY_MARK));
    if (figs.length > 0) expect(carriers).toEqual([figs[0]]);
    expect(executed.bytes, `${name}.ipynb executed`).toBeLessThan(MAX_EXECUTED_BYTES);
    // Exported to HTML and opened offline, every figure is drawn as SVG.
    expect(executed.charts, `${name}: charts on the exported page`).toHaveLength(figs.length);
    const problems = executed.charts.flatMap((chart, i) => {
      const title = (figs[i].data![PLOTLY] as { layout: { title: { text: string } } }).layout.title.text;
      const which = `${name}: chart ${i + 1} of ${figs.length} ("${title}")`;
      if (chart.failed !== null) return [`${which} failed: ${chart.failed}`];
      if (!chart.drawn) return [`${which} never drew within ${DRAW_TIMEOUT_MS / 1000} s (page errors: ${executed.pageErrors.join("; ") || "none"})`];
      if (!chart.svg) return [`${which} reported drawn but holds no svg.main-svg`];
      return [];
    });
    expect(problems).toEqual([]);
    return executed;
  }

  test("01-quickstart: tokens, logits, routing, step-by-step decode, 100 streamed tokens", async () => {
    const { cells } = await executedWell("01-quickstart");
    const all = outputs(cells);
    expect(plain(all.find((o) => plain(o).startsWith("Tensor float32 [6, ")))).toMatch(/^Tensor float32 \[6, \d+\]\n\[\[/);
    // The routing chart names its tokens by their text.
    const routing = figures(cells).map((f) => f.data![PLOTLY] as { layout: { xaxis: { ticktext: string[] } } });
    expect(routing.some((spec) => spec.layout.xaxis.ticktext.join("") === "The jury said that the city")).toBe(true);
    const streams = all.filter((o) => String(o.data?.["text/html"] ?? "").includes('class="moelens-token-stream"'));
    expect(streams).toHaveLength(2);
    expect(plain(streams[0]).startsWith("The jury said that the city")).toBe(true);
    expect(String(streams[0].data!["text/html"])).toContain("30 tokens");
    expect(String(streams[0].data!["text/html"])).toContain('title="expert ');
    expect(String(streams[1].data!["text/html"])).toMatch(/100 tokens · [\d.]+ tokens\/s · length/);
    expect(all.some((o) => plain(o).startsWith("Loading the model [") && plain(o).includes("100%"))).toBe(true);
  }, NOTEBOOK_TEST_MS);

  test("02-expert-routing: routing, loads per domain, balance, co-occurrence, consistency", async () => {
    const { cells } = await executedWell("02-expert-routing");
    expect(figures(cells)).toHaveLength(8);
    const load = outputs(cells).find((o) => plain(o).startsWith("ExpertLoad: "));
    expect(load?.data?.[PLOTLY]).toBeDefined();
    expect(String(load?.data?.["text/html"])).toContain("entropy / log E");
  }, NOTEBOOK_TEST_MS);

  test("03-deltanet-memory: gates, state norms, a snapshot that matches the trace, resets", async () => {
    const { cells } = await executedWell("03-deltanet-memory");
    const snapshot = cells.find((c) => joined(c.source).includes("session.deltanetState("))!;
    const norms = [...plain(result(snapshot)).matchAll(/fromSnapshot: ([\d.]+), fromTrace: ([\d.]+)/g)];
    expect(norms.length).toBeGreaterThan(0);
    for (const [, snap, traced] of norms) expect(Number(snap)).toBeCloseTo(Number(traced), 4);
    expect(figures(cells)).toHaveLength(7);
  }, NOTEBOOK_TEST_MS);

  test("04-interventions: ablation, forcing, shared expert, steering, patching", async () => {
    const { cells } = await executedWell("04-interventions");
    expect(figures(cells)).toHaveLength(3);
    const forcing = result(cells.find((c) => joined(c.source).includes("forceExperts(last, [unlikely])"))!);
    const forced = /forced: (\d+)/.exec(plain(forcing))![1];
    expect(plain(forcing)).toMatch(new RegExp(`'chosen now': \\[[^\\]]*'${forced}: `));
    const steering = outputs(cells).filter((o) => plain(o).startsWith("[scale "));
    expect(steering.map((o) => plain(o).slice(0, 9))).toEqual(["[scale 0]", "[scale 1]", "[scale 2]"]);
  }, NOTEBOOK_TEST_MS);

  test("05-lesson: the renormalised router weights are the ones the model used", async () => {
    const { cells } = await executedWell("05-lesson-moe-and-deltanet");
    const check = result(cells.find((c) => joined(c.source).includes("probability / top-k sum"))!);
    const pairs = [...plain(check).matchAll(/'probability \/ top-k sum': ([\d.]+),\s+'weight used': ([\d.]+)/g)];
    expect(pairs.length).toBeGreaterThan(0);
    for (const [, renormalised, used] of pairs) expect(Number(renormalised)).toBeCloseTo(Number(used), 3);
    expect(figures(cells)).toHaveLength(5);
  }, NOTEBOOK_TEST_MS);

  test("07-hooks: a hook function agrees with the built-in edit; a failing hook leaves the session", async () => {
    const { cells } = await executedWell("07-hooks");
    expect(figures(cells)).toHaveLength(1);
    const agree = result(cells.find((c) => joined(c.source).includes("meanAblateHead(1)"))!);
    expect(plain(agree)).toMatch(/'hook and edit agree': true/);
    const listing = outputs(cells).filter((o) => o.output_type === "stream").map((o) => joined(o.text)).join("");
    expect(listing).toMatch(/^blocks\.0\.resid_post +\[n, \d+\]/m);
    const rolledBack = result(cells.find((c) => joined(c.source).includes('throw new Error("stop here")'))!);
    expect(plain(rolledBack)).toContain('rejected with "stop here"; the session is still at position 10');
  }, NOTEBOOK_TEST_MS);

  test("06-corpus-routing: traces a corpus into shards and reads them back with Arrow JS", async () => {
    const { cells } = await executedWell("06-corpus-routing");
    const traced = plain(result(cells.find((c) => joined(c.source).includes("await traceCorpus("))!));
    const [, done, count, tokens] = /traced (\d+)\/(\d+) prompts, (\d+) tokens, in \d+ shards/.exec(traced)!;
    expect(done).toBe(count);
    // every traced token read back from the shards, with its text
    const read = plain(result(cells.find((c) => joined(c.source).includes("tableFromIPC("))!));
    expect(read).toContain(`rows: ${tokens},`);
    expect(read).toContain("'token_text: Utf8'");
    expect(read).toMatch(/firstToken: \{ prompt_id: 'prose-0', token_text: 'The', layer0Experts: \[ \d+, \d+, \d+, \d+ \] \}/);
    expect(figures(cells)).toHaveLength(2);
    expect(plain(result(cells.find((c) => joined(c.source).includes("const candidates"))!))).toMatch(/'expert \d+ \((prose|code|arithmetic), [\d.]+\)': '"/);
  }, NOTEBOOK_TEST_MS);
});

describe("the committed notebooks", () => {
  test("carry no outputs, use the moelens kernel, and are all tested", () => {
    const files = fs.readdirSync(NOTEBOOKS).filter((f) => f.endsWith(".ipynb"));
    expect(files.sort()).toEqual(NAMES.map((n) => `${n}.ipynb`));
    for (const file of files) {
      const notebook = JSON.parse(fs.readFileSync(path.join(NOTEBOOKS, file), "utf8"));
      expect(notebook.metadata.kernelspec.name, file).toBe("moelens");
      for (const cell of (notebook.cells as Cell[]).filter((c) => c.cell_type === "code")) {
        expect(cell.outputs, `${file}: ${joined(cell.source).slice(0, 60)}`).toEqual([]);
        expect(cell.execution_count, file).toBeNull();
      }
    }
  });
});
