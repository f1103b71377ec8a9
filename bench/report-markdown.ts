// The Markdown table of a bench/cpu-bench.ts run, and its place in docs/performance.md (between the
// cpu-bench markers, so re-running the benchmark with --doc replaces the table and nothing else).
import type { BenchResult } from "./bench-result";

export const DOC_START = "<!-- cpu-bench:start -->";
export const DOC_END = "<!-- cpu-bench:end -->";

const GB = 1e9;
const GiB = 2 ** 30;
const fixed = (x: number, digits: number) => x.toFixed(digits);
const pct = (x: number) => `${(x * 100).toFixed(0)} %`;
const gib = (b: number | null) => (b === null ? "n/a" : fixed(b / GiB, 2));
// fp32 is the exact configuration the parity tests check; int24 passes the same parity tests; int8 and
// int16 are the reduced-precision modes.
const precisionLabel = (p: string | undefined) =>
  p === "int8" || p === "int16"
    ? `${p} activations, reduced precision`
    : p === "int24"
      ? "int24 activations in decode, parity-checked"
      : "fp32, exact";

export function renderMarkdown(r: BenchResult): string {
  const m = r.machine;
  const lines = [
    `Measured ${r.date.slice(0, 16).replace("T", " ")} UTC on ${m.cores} × ${m.cpu} (${m.isa.join(", ")}), ` +
      `${m.memoryGiB} GiB, ${m.kernel}, Node ${m.node}; moelens ${r.moelensCommit ?? "(no git)"}; ${r.threads} threads; ` +
      `1-minute load average ${fixed(r.loadAverage.start, 1)} at the start, ${fixed(r.loadAverage.end, 1)} at the end` +
      // The benchmark's own threads count toward the load; more than one runnable process beyond the
      // cores means something else competed.
      (Math.max(r.loadAverage.start, r.loadAverage.end) > m.cores + 1 ? " (other processes competed for the cores)." : "."),
    "",
    `Model: \`${r.model.dir}\` (${fixed(r.model.weightBytes / GB, 2)} GB of safetensors). ` +
      `Read bandwidth (${r.bandwidth.before.threads}-thread stream read, best of 10 passes over 1 GiB): ` +
      `${fixed(r.bandwidth.before.best_gb_s, 1)} GB/s before, ${fixed(r.bandwidth.after.best_gb_s, 1)} GB/s after; ` +
      `the higher counts. Decode moves ${fixed(r.decodeBytesPerTokenZeroContext / GB, 3)} GB per token at zero context ` +
      `(+${r.traffic.kvPerContextToken} bytes per context token).`,
    "",
    "| engine | prompt | prefill tok/s | decode tok/s | decode GB/s | of read bandwidth | peak RSS GiB | rounds agree |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
  ];
  for (const row of r.moelens) {
    const agree = `${row.tokensAgree ? "tokens ✓" : "tokens ✗"}, drift ${fixed(row.drift * 100, 1)} %${row.drift > 0.03 ? " (> 3 %)" : ""}`;
    lines.push(
      `| moelens ${precisionLabel(row.precision)} (${r.decodeSteps} decode steps, median of ${row.rounds.length}) | ${row.prompt} | ${fixed(row.prefillTokPerSec, 2)} | ` +
        `${fixed(row.decodeTokPerSec, 2)} | ${fixed((row.decodeTokPerSec * row.decodeBytesPerToken) / GB, 2)} | ` +
        `${pct(row.decodeBandwidthFraction)} | ${gib(row.peakRssBytes)} | ${agree} |`,
    );
  }
  if (r.llama) {
    const l = r.llama;
    lines.push(
      `| llama.cpp ${l.buildCommit ?? ""} ${l.modelType ?? ""} (pp512 / tg128, median of ${l.rounds} rounds of ${l.repetitions}) | 512 / 0 | ` +
        `${fixed(l.prefill.tokPerSec, 2)} ± ${fixed(l.prefill.stddev, 2)} | ${fixed(l.decode.tokPerSec, 2)} ± ${fixed(l.decode.stddev, 2)} | ` +
        `${fixed((l.decode.tokPerSec * l.decodeBytesPerToken) / GB, 2)} | ` +
        `${pct(l.decodeBandwidthFraction)} | ${gib(l.peakRssBytes)} | |`,
    );
  }
  if (r.ratios) {
    lines.push("");
    for (const q of r.ratios) {
      const mine = r.moelens.filter((row) => (row.precision ?? "fp32") === q.precision);
      lines.push(
        `**moelens ${precisionLabel(q.precision)} / llama.cpp:** decode ${fixed(q.decode, 2)}× (prompt ${q.decodeAtPrompt} vs tg128; goal ≥ 1.3×; ` +
          `per round ${q.decodeRounds.map((x) => fixed(x, 2)).join(", ")}), ` +
          `prefill ${fixed(q.prefill, 2)}× (prompt ${q.prefillAtPrompt} vs pp512; goal ≥ 1.0×; per round ${q.prefillRounds.map((x) => fixed(x, 2)).join(", ")}). ` +
          `Decode reaches ${pct(Math.max(...mine.map((row) => row.decodeBandwidthFraction)))} of the read bandwidth (goal ≥ 80 %).`,
        "",
      );
    }
    lines.pop();
  }
  lines.push("", `Command: \`${r.command}\``);
  return lines.join("\n") + "\n";
}

/** `doc` with the text between the cpu-bench markers replaced by `markdown`. */
export function replaceDocSection(doc: string, markdown: string, docName: string): string {
  const start = doc.indexOf(DOC_START), end = doc.indexOf(DOC_END);
  if (start < 0 || end < start) throw new Error(`${docName}: no '${DOC_START}' ... '${DOC_END}' section to replace`);
  return doc.slice(0, start + DOC_START.length) + "\n" + markdown + doc.slice(end);
}
