// The speed line generate and chat print on stderr.
import type { FinishReason, GenerateTimings } from "../generate/generate";

export function speedLine(t: GenerateTimings, finish: FinishReason | undefined): string {
  const rate = (n: number, ms: number, perSecond: number) => `${n} tokens in ${ms.toFixed(0)} ms, ${perSecond.toFixed(1)} tok/s`;
  return (
    `prefill ${rate(t.promptTokens, t.prefillMs, t.prefillTokensPerSecond)}; ` +
    `decode ${rate(t.generatedTokens, t.decodeMs, t.decodeTokensPerSecond)}; finish: ${finish ?? "?"}`
  );
}
