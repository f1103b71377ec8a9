// How bench/cpu-bench.ts summarises repeated runs: its own rounds, and llama-bench's rounds.
import { expect, test } from "vitest";
import { medianOfRounds, type LlamaResult } from "../bench/llama-peer";
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
