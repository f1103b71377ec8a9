// One log line per request (to stderr by default): time, method, path, status, tokens, decode speed,
// duration. A generation adds its token counts, finish reason, queue wait and prefill time; a client
// that went away is marked.
import type { GenerationOutcome } from "./engine";

export interface RequestRecord {
  method: string;
  path: string;
  status: number;
  ms: number;
  /** The client closed the connection before the response ended. */
  clientClosed: boolean;
  generation?: GenerationOutcome;
  /** The error message of a 4xx/5xx. */
  error?: string;
}

export function formatRequestLine(r: RequestRecord, now = new Date()): string {
  const parts = [now.toISOString(), r.method, r.path, String(r.status)];
  if (r.clientClosed) parts.push("client-closed");
  const g = r.generation;
  if (g) {
    parts.push(
      `prompt=${g.promptTokens}`,
      `cached=${g.cachedTokens}`,
      `completion=${g.completionTokens}`,
      `finish=${g.finishReason}`,
      `queue=${g.queueMs.toFixed(0)}ms`,
      `prefill=${g.prefillMs.toFixed(0)}ms`,
      `${g.decodeTokensPerSecond.toFixed(1)} tok/s`,
    );
  }
  parts.push(`${r.ms.toFixed(0)} ms`);
  if (r.error !== undefined) parts.push(`error: ${JSON.stringify(r.error)}`);
  return parts.join(" ");
}
