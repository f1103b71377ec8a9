// How bench/cpu-bench.ts summarises repeated runs: its own rounds, and llama-bench's rounds.
import { expect, test } from "vitest";
import { medianOfRounds, type LlamaResult } from "../bench/llama-peer";
import { peerRatios } from "../bench/peer-ratios";
import { median, spread, stddev } from "../bench/stats";

test("median, spread and standard deviation", () => {
  expect(median([3, 1, 2])).toBe(2);
  expect(median([4, 1, 3, 2])).toBe(2.5);
  expect(spread([9, 10, 11])).toBeCloseTo(0.2, 12);
  expect(stddev([2, 4, 4, 4, 5, 5, 7, 9])).toBeCloseTo(2.138, 3);
});

test("llama-bench rounds combine into the median of the rounds' means, over all samples", () => {
  const round = (pp: number[], tg: number[], rss: number | null): LlamaResult => ({
    binary: "llama-bench", gguf: "m.gguf", threads: 2, repetitions: pp.length, rounds: 1,
    buildCommit: "abc", modelType: "qwen35moe", modelBytes: 1,
    prefill: { test: "pp512", tokPerSec: pp.reduce((a, b) => a + b) / pp.length, stddev: 0, samples: pp },
    decode: { test: "tg128", tokPerSec: tg.reduce((a, b) => a + b) / tg.length, stddev: 0, samples: tg },
    peakRssBytes: rss, seconds: 10,
  });
  const r = medianOfRounds([round([20, 22], [10, 12], 5), round([30, 30], [9, 9], null), round([25, 27], [14, 14], 7)]);
  expect(r.rounds).toBe(3);
  expect(r.prefill.tokPerSec).toBe(26);
  expect(r.decode.tokPerSec).toBe(11);
  expect(r.decode.samples).toEqual([10, 12, 9, 9, 14, 14]);
  expect(r.decode.stddev).toBeCloseTo(stddev([10, 12, 9, 9, 14, 14]), 12);
  expect(r.peakRssBytes).toBe(7);
  expect(r.seconds).toBe(30);
});

test("ratios to llama.cpp: median over median, and paired per round", () => {
  const llamaRound = (pp: number, tg: number): LlamaResult => ({
    binary: "llama-bench", gguf: "m.gguf", threads: 2, repetitions: 1, rounds: 1, buildCommit: null, modelType: null, modelBytes: 1,
    prefill: { test: "pp512", tokPerSec: pp, stddev: 0, samples: [pp] },
    decode: { test: "tg128", tokPerSec: tg, stddev: 0, samples: [tg] },
    peakRssBytes: null, seconds: 1,
  });
  const llamaRounds = [llamaRound(20, 10), llamaRound(30, 20), llamaRound(25, 12)];
  const llama = medianOfRounds(llamaRounds);
  const row = (precision: string, prompt: number, rounds: [number, number][]) => ({
    precision, prompt,
    rounds: rounds.map(([p, d]) => ({ prefillTokPerSec: p, decodeTokPerSec: d })),
    prefillTokPerSec: median(rounds.map((r) => r[0])), decodeTokPerSec: median(rounds.map((r) => r[1])),
  });
  const rows = [
    row("fp32", 128, [[10, 12], [11, 13], [12, 24]]),
    row("fp32", 512, [[30, 9], [36, 9], [25, 9]]),
    row("int8", 512, [[50, 15], [50, 15], [50, 15]]),
  ];
  const [fp32, int8] = peerRatios(rows, ["fp32", "int8"], llama, llamaRounds);
  // decode from the shortest prompt, prefill from the prompt closest to 512
  expect(fp32.decodeAtPrompt).toBe(128);
  expect(fp32.prefillAtPrompt).toBe(512);
  expect(fp32.decode).toBeCloseTo(13 / 12, 12);
  expect(fp32.prefill).toBeCloseTo(30 / 25, 12);
  expect(fp32.decodeRounds).toEqual([12 / 10, 13 / 20, 24 / 12]);
  expect(fp32.prefillRounds).toEqual([30 / 20, 36 / 30, 25 / 25]);
  expect(int8.decodeAtPrompt).toBe(512);
  expect(int8.decodeRounds).toEqual([1.5, 0.75, 1.25]);
  expect(() => peerRatios(rows, ["int24"], llama, llamaRounds)).toThrow(/no rows for precision int24/);
});
