// Corpus tracing: `moelens trace` on the embedded model over 200 prompts, killed (SIGKILL) and
// interrupted (SIGINT) part-way, then resumed: the shards hold every prompt exactly once, token by
// token, with token text and the same routing as a direct prefill. Memory: the buffered rows never
// exceed the shard size, however long the prompts, and the tracing process's peak resident memory
// stays put when the corpus grows fourfold.
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { tableFromIPC, type Table } from "apache-arrow";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load, traceCorpus, type CorpusManifest, type Model } from "moelens";
import { bin, ensureBuiltCli, root } from "./helpers/built-cli";

const SHARD_TOKENS = 48;
let tmp: string;
let model: Model;

const WORDS = ["river", "jury", "city", "é", "数据", "expert", "the", "of", "😀", "code", "x = 1;", "\n", "quiet", "42"];
function promptText(i: number): string {
  const n = 3 + (i % 7);
  return Array.from({ length: n }, (_, j) => WORDS[(i * 7 + j * 3) % WORDS.length]).join(" ") + ` ${i}.`;
}

function writePrompts(file: string, count: number, text: (i: number) => string): void {
  fs.writeFileSync(file, Array.from({ length: count }, (_, i) => JSON.stringify({ id: `p${i}`, text: text(i) })).join("\n") + "\n");
}

function readManifest(dir: string): CorpusManifest {
  return JSON.parse(fs.readFileSync(path.join(dir, "manifest.json"), "utf8")) as CorpusManifest;
}

// Loaded before the CLI: prints the process's peak resident set size (getrusage's ru_maxrss) as it exits.
const REPORT_PEAK_RSS =
  "data:text/javascript," +
  encodeURIComponent('import { writeSync } from "node:fs"; process.on("exit", () => writeSync(2, `peak-rss-kib ${process.resourceUsage().maxRSS}\\n`));');

/** Runs `moelens trace`; sends `signal` once `afterShards` shard lines were printed. */
function trace(
  args: string[],
  stop?: { signal: NodeJS.Signals; afterShards: number },
  nodeFlags: string[] = [],
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; shardsSeen: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeFlags, bin, "trace", ...args], { cwd: root, stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    let shardsSeen = 0;
    let sent = false;
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (text: string) => {
      stderr += text;
      shardsSeen = (stderr.match(/^shard-\d+\.arrow: /gm) ?? []).length;
      if (stop && !sent && shardsSeen >= stop.afterShards) {
        sent = true;
        child.kill(stop.signal);
      }
    });
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, stderr, shardsSeen }));
  });
}

function shardTables(dir: string, manifest: CorpusManifest): Table[] {
  return manifest.shards.map((s) => tableFromIPC(fs.readFileSync(path.join(dir, s.file))));
}

beforeAll(async () => {
  ensureBuiltCli();
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-corpus-"));
  model = await load(undefined, { threads: 1 });
}, 180_000);
afterAll(() => {
  model?.tokenizer?.close();
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

describe("moelens trace", () => {
  it("killed, interrupted and resumed: every prompt exactly once, with token text and the direct prefill's routing", async () => {
    const prompts = path.join(tmp, "prompts.jsonl");
    const out = path.join(tmp, "trace");
    writePrompts(prompts, 200, promptText);
    const args = ["--prompts", prompts, "--out", out, "--capture", "router,deltanet", "--shard-tokens", String(SHARD_TOKENS), "--threads", "1"];

    const killed = await trace(args, { signal: "SIGKILL", afterShards: 12 });
    expect(killed.signal).toBe("SIGKILL");
    const afterKill = readManifest(out);
    expect(afterKill.complete).toBe(false);
    expect(afterKill.shards.length).toBeGreaterThanOrEqual(12);
    expect(afterKill.next.prompt).toBeGreaterThan(0);
    expect(afterKill.next.prompt).toBeLessThan(200);

    const interrupted = await trace(args, { signal: "SIGINT", afterShards: 6 });
    expect(interrupted.code, interrupted.stderr).toBe(130);
    expect(interrupted.stderr).toMatch(/interrupted: \d+\/200 prompts, \d+ tokens in \d+ shards .*run the same command again to continue/);
    const afterInterrupt = readManifest(out);
    expect(afterInterrupt.complete).toBe(false);
    expect(afterInterrupt.shards.length).toBeGreaterThan(afterKill.shards.length);
    expect(afterInterrupt.shards.slice(0, afterKill.shards.length)).toEqual(afterKill.shards);

    const finished = await trace(args);
    expect(finished.code, finished.stderr).toBe(0);
    expect(finished.stderr).toMatch(/traced 200\/200 prompts, \d+ tokens in \d+ shards in .* \(resumed\)/);
    const manifest = readManifest(out);
    expect(manifest.complete).toBe(true);
    expect(manifest.shards.slice(0, afterInterrupt.shards.length)).toEqual(afterInterrupt.shards);
    // Only the manifest's shards are in the folder; shards follow each other without gaps.
    expect(fs.readdirSync(out).sort()).toEqual(["manifest.json", ...manifest.shards.map((s) => s.file)].sort());
    manifest.shards.forEach((s, i) => {
      expect(s.rows).toBeLessThanOrEqual(SHARD_TOKENS);
      if (i > 0) expect(s.start).toEqual(manifest.shards[i - 1].end);
    });

    // Every prompt's tokens exactly once, in order, with their text.
    const tok = model.tokenizer!;
    const seen = new Map<number, { positions: number[]; ids: number[]; texts: string[]; experts: number[][][] }>();
    for (const table of shardTables(out, manifest)) {
      expect(table.schema.fields.map((f) => f.name)).toEqual([
        "prompt", "prompt_id", "position", "token", "token_text",
        "router_experts", "router_weights", "shared_gate", "deltanet_beta", "deltanet_decay", "deltanet_state_norm",
      ]);
      const rows = table.numRows;
      const col = (name: string) => table.getChild(name)!;
      for (let r = 0; r < rows; r++) {
        const p = col("prompt").get(r) as number;
        expect(col("prompt_id").get(r)).toBe(`p${p}`);
        const entry = seen.get(p) ?? { positions: [], ids: [], texts: [], experts: [] };
        entry.positions.push(col("position").get(r));
        entry.ids.push(col("token").get(r));
        entry.texts.push(col("token_text").get(r));
        const layers = col("router_experts").get(r)!;
        entry.experts.push(Array.from({ length: layers.length }, (_, l) => Array.from(layers.get(l).toArray() as Int32Array)));
        seen.set(p, entry);
      }
    }
    expect([...seen.keys()].sort((a, b) => a - b)).toEqual([...Array(200).keys()]);
    let tokens = 0;
    for (const [p, entry] of seen) {
      const ids = tok.encode(promptText(p));
      expect(entry.ids, `prompt ${p}`).toEqual(ids);
      expect(entry.positions).toEqual(ids.map((_, i) => i));
      expect(entry.texts).toEqual(ids.map((id) => tok.decode([id])));
      tokens += ids.length;
    }
    expect(manifest.tokens).toBe(tokens);

    // The routing in the shards is the direct prefill's, for prompts cut by the kill and by a shard end.
    const cut = [afterKill.next.prompt, afterInterrupt.next.prompt, manifest.shards[3].end.prompt, 0, 199];
    for (const p of cut) {
      const ids = tok.encode(promptText(p));
      const r = await model.session().prefill(ids, { logits: "none", capture: ["router"] });
      const direct = ids.map((_, t) => Array.from({ length: model.config.numLayers }, (_, l) => r.router!.chosen(l, t).map((c) => c.expert)));
      expect(seen.get(p)!.experts, `prompt ${p}`).toEqual(direct);
    }
  }, 180_000);

  it("refuses bad input with the file, line or option named", async () => {
    const bad = path.join(tmp, "bad.jsonl");
    const run = (args: string[]) => spawnSync(process.execPath, [bin, "trace", ...args], { cwd: root, encoding: "utf8", timeout: 60_000 });
    const out = path.join(tmp, "bad-out");
    const cases: [string, string[], number, RegExp][] = [
      ['{"text": "ok"}\n{"text": 3}\n', [], 1, /bad\.jsonl:2: "text" must be a non-empty string/],
      ['{"text": "ok"}\nnot json\n', [], 1, /bad\.jsonl:2: not JSON/],
      ['{"id": "a", "text": "x"}\n\n{"id": "a", "text": "y"}\n', [], 1, /bad\.jsonl:3: prompt id "a" is also on line 1/],
      ['{"ids": [1, 2], "text": "x"}\n', [], 1, /bad\.jsonl:1: give exactly one of "text"/],
      ['{"ids": [1, 99999]}\n', [], 1, /bad\.jsonl:1: token id 99999 is outside the vocabulary \[0, 8064\)/],
      [`{"text": "ok"}\n${JSON.stringify({ text: "7 ".repeat(5000) })}\n`, [], 1, /bad\.jsonl:2: \d+ tokens, more than the model's context \(4096\)/],
      ["\n\n", [], 1, /bad\.jsonl: no prompts/],
      ['{"text": "ok"}\n', ["--capture", "router,experts"], 2, /--capture experts: unknown \(known: router, residual, residual-mid, deltanet, attention-gate\)/],
      ['{"text": "ok"}\n', ["--shard-tokens", "0"], 2, /--shard-tokens 0: must be an integer >= 1/],
    ];
    for (const [content, extra, status, message] of cases) {
      fs.writeFileSync(bad, content);
      const r = run(["--prompts", bad, "--out", out, "--overwrite", ...extra]);
      expect(r.stderr, content).toMatch(message);
      expect(r.status, content).toBe(status);
    }
    expect(run(["--out", out]).stderr).toMatch(/trace needs --prompts FILE\.jsonl/);
    expect(run(["--prompts", path.join(tmp, "missing.jsonl"), "--out", out]).stderr).toMatch(/missing\.jsonl: no such prompts file/);
    // A folder traced with other settings is not resumed by mistake.
    fs.writeFileSync(bad, '{"text": "one"}\n{"text": "two"}\n');
    expect(run(["--prompts", bad, "--out", out, "--overwrite"]).status).toBe(0);
    const other = run(["--prompts", bad, "--out", out, "--capture", "residual"]);
    expect(other.status).toBe(1);
    expect(other.stderr).toMatch(/manifest\.json: cannot resume: the captures differ \(router, now residual\)/);
    fs.writeFileSync(bad, '{"text": "one"}\n{"text": "three"}\n');
    expect(run(["--prompts", bad, "--out", out]).stderr).toMatch(/cannot resume: the prompts differ/);
    const help = run(["--help"]);
    expect(help.status).toBe(0);
    expect(help.stdout).toContain("--shard-tokens");
  }, 180_000);

  it("bounds memory by the shard size: buffered rows and shard rows stay at most the shard size as prompts grow", async () => {
    for (const words of [4, 60, 400]) {
      const prompts = path.join(tmp, `grow-${words}.jsonl`);
      const text = (i: number) => Array.from({ length: words }, (_, j) => WORDS[(i + j) % WORDS.length]).join(" ");
      writePrompts(prompts, 6, text);
      let buffered = 0;
      const r = await traceCorpus(model, {
        prompts, out: path.join(tmp, `grow-${words}`), capture: ["router", "residual"], shardTokens: 64,
        onProgress: (p) => void (buffered = Math.max(buffered, p.buffered)),
      });
      const longest = Math.max(...Array.from({ length: 6 }, (_, i) => model.tokenizer!.encode(text(i)).length));
      expect(buffered).toBeLessThanOrEqual(64);
      for (const s of r.manifest.shards) expect(s.rows).toBeLessThanOrEqual(64);
      if (longest > 64) expect(r.manifest.shards.some((s) => s.end.position > 0)).toBe(true); // a prompt split across shards
      const tables = r.shards.map((f) => tableFromIPC(fs.readFileSync(f)));
      expect(tables.reduce((n, t) => n + t.numRows, 0)).toBe(r.manifest.tokens);
      const residual = tables[0].getChild("residual")!.get(0)!;
      expect([residual.length, residual.get(0).length]).toEqual([model.config.numLayers, model.config.hiddenSize]);
      // The last row of the first shard holds the residual of a direct prefill at that token, in every layer.
      const row = tables[0].numRows - 1;
      const p = tables[0].getChild("prompt")!.get(row) as number;
      const at = tables[0].getChild("position")!.get(row) as number;
      const direct = await model.session().prefill(model.tokenizer!.encode(text(p)).slice(0, at + 1), { logits: "none", capture: ["residual"] });
      const stored = tables[0].getChild("residual")!.get(row)!;
      for (let l = 0; l < model.config.numLayers; l++) {
        const want = direct.residual!.index(l).index(at).data;
        const got = stored.get(l).toArray() as Float32Array;
        let worst = 0;
        for (let d = 0; d < want.length; d++) worst = Math.max(worst, Math.abs(got[d] - want[d]));
        expect(worst, `layer ${l}`).toBeLessThan(1e-3);
      }
    }
  }, 60_000);

  it("bounds the process's memory: peak RSS of `moelens trace` hardly moves when the corpus grows fourfold", async () => {
    // ~150 tokens per prompt; residual and residual-mid make each token's captured values 16 KiB.
    const text = (i: number) => Array.from({ length: 60 }, (_, j) => WORDS[(i * 5 + j * 3) % WORDS.length]).join(" ");
    const run = async (count: number) => {
      const prompts = path.join(tmp, `memory-${count}.jsonl`);
      const out = path.join(tmp, `memory-${count}`);
      writePrompts(prompts, count, text);
      const args = ["--prompts", prompts, "--out", out, "--capture", "router,residual,residual-mid", "--shard-tokens", "128", "--threads", "1"];
      const r = await trace(args, undefined, ["--import", REPORT_PEAK_RSS]);
      expect(r.code, r.stderr).toBe(0);
      const manifest = readManifest(out);
      expect(manifest.complete).toBe(true);
      const bytesPerToken = manifest.columns.reduce((sum, c) => sum + (c.dims ? 4 * c.dims.reduce((a, b) => a * b, 1) : 0), 0);
      const peak = Number(/^peak-rss-kib (\d+)$/m.exec(r.stderr)?.[1]) * 1024;
      return { peak, captured: manifest.tokens * bytesPerToken };
    };
    const [small, large] = await Promise.all([run(12), run(48)]);
    expect(small.peak).toBeGreaterThan(20 * 2 ** 20); // the measurement is there: Node and the model alone take more
    // The larger corpus adds its captured values (16 KiB a token), over 64 MiB of them. A tracer that kept
    // them, or the Arrow tables built from them, would grow its peak by at least that much. The bound is a
    // quarter of it: room for the garbage collector's timing, never for the corpus.
    const added = large.captured - small.captured;
    expect(added).toBeGreaterThan(64 * 2 ** 20);
    expect(large.peak - small.peak, `peak RSS ${small.peak} B for 12 prompts, ${large.peak} B for 48`).toBeLessThan(added / 4);
  }, 120_000);
});
