// What one bench/cpu-bench.ts run measured: written as JSON (--json) and rendered as Markdown
// (report-markdown.ts).
import type { DecodeTraffic } from "./decode-traffic";
import type { LlamaResult } from "./llama-peer";
import type { WorkerResult } from "./moelens-worker";
import type { Precision } from "../sdk/model";
import type { PeerRatio } from "./peer-ratios";
import type { ReadBandwidth } from "./read-bandwidth";

export interface MoelensRow {
  precision: Precision;
  prompt: number;
  rounds: WorkerResult[];
  prefillTokPerSec: number; // median over rounds
  decodeTokPerSec: number;
  drift: number; // largest relative spread of prefill or decode between rounds
  tokensAgree: boolean; // every round decoded the same greedy tokens
  peakRssBytes: number;
  decodeBytesPerToken: number; // at the mean context of the decode steps
  decodeBandwidthFraction: number;
}

export interface BenchResult {
  date: string;
  command: string;
  machine: { cpu: string; cores: number; memoryGiB: number; kernel: string; node: string; isa: string[] };
  loadAverage: { start: number; end: number }; // 1-minute load: other processes competing for the cores
  moelensCommit: string | null;
  model: { dir: string; weightBytes: number };
  threads: number;
  decodeSteps: number;
  bandwidth: { before: ReadBandwidth; after: ReadBandwidth; gbPerSec: number };
  traffic: DecodeTraffic;
  decodeBytesPerTokenZeroContext: number;
  moelens: MoelensRow[];
  llama: (LlamaResult & { decodeBytesPerToken: number; decodeBandwidthFraction: number }) | null;
  // One entry per moelens precision (bench/peer-ratios.ts).
  ratios: PeerRatio<Precision>[] | null;
}
