// moelens over llama.cpp, per precision (bench/cpu-bench.ts): decode from the row with the shortest
// prompt (tg128 starts from an empty context), prefill from the row whose prompt is closest to 512.
// Two views: the median of our rounds over the median of llama.cpp's, and per round, ours over
// llama.cpp's of the same round (paired: both ran minutes apart, so the host's slower drifts cancel).
import type { LlamaResult } from "./llama-peer";

interface Speeds {
  prefillTokPerSec: number;
  decodeTokPerSec: number;
}

export interface RatioRow<P extends string> extends Speeds {
  precision: P;
  prompt: number;
  rounds: Speeds[];
}

export interface PeerRatio<P extends string> {
  precision: P;
  decode: number;
  decodeAtPrompt: number;
  prefill: number;
  prefillAtPrompt: number;
  decodeRounds: number[];
  prefillRounds: number[];
}

export function peerRatios<P extends string>(rows: RatioRow<P>[], precisions: P[], llama: LlamaResult, llamaRounds: LlamaResult[]): PeerRatio<P>[] {
  return precisions.map((precision) => {
    const mine = rows.filter((r) => r.precision === precision);
    if (!mine.length) throw new Error(`peerRatios: no rows for precision ${precision}`);
    const dRow = mine.reduce((a, b) => (b.prompt < a.prompt ? b : a));
    const pRow = mine.reduce((a, b) => (Math.abs(b.prompt - 512) < Math.abs(a.prompt - 512) ? b : a));
    const paired = (row: RatioRow<P>, pick: (s: Speeds) => number, peer: (l: LlamaResult) => number) =>
      llamaRounds.slice(0, row.rounds.length).map((l, i) => pick(row.rounds[i]) / peer(l));
    return {
      precision,
      decode: dRow.decodeTokPerSec / llama.decode.tokPerSec,
      decodeAtPrompt: dRow.prompt,
      prefill: pRow.prefillTokPerSec / llama.prefill.tokPerSec,
      prefillAtPrompt: pRow.prompt,
      decodeRounds: paired(dRow, (s) => s.decodeTokPerSec, (l) => l.decode.tokPerSec),
      prefillRounds: paired(pRow, (s) => s.prefillTokPerSec, (l) => l.prefill.tokPerSec),
    };
  });
}
