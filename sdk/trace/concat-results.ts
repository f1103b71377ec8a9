// One result from the results of consecutive calls: a prefill and the decode steps after it.
import type { ForwardResult } from "../forward";
import { ActivationCache } from "../hooks/activation-cache";
import { AttentionGateTrace, AttentionTrace } from "./attention";
import { concatTokens } from "./concat";
import { DeltaNetTrace } from "./deltanet";
import { RouterTrace } from "./router";
import { concatSpans } from "./span";

/**
 * Joins the results of consecutive calls (positions must be continuous): the traces every result
 * has, token after token, and the logits rows of every call in order. A capture that only some of
 * the calls recorded is left out, and so are attention weights in the cache (their key axis grows
 * from call to call; the attention trace joins them).
 */
export function concatResults(results: ForwardResult[]): ForwardResult {
  const span = concatSpans(results.map((r) => r.span), "concatResults");
  const all = <T>(pick: (r: ForwardResult) => T | undefined): T[] | undefined => {
    const found = results.map(pick);
    return found.every((x) => x !== undefined) ? (found as T[]) : undefined;
  };
  const logits = concatTokens(results.map((r) => r.logits), 0, "concatResults");
  const out: ForwardResult = { tokens: span.ids.length, span, logits, cache: concatCaches(results) };
  const router = all((r) => r.router);
  if (router) out.router = RouterTrace.concat(router);
  const residual = all((r) => r.residual);
  if (residual) out.residual = concatTokens(residual, 1, "concatResults");
  const residualMid = all((r) => r.residualMid);
  if (residualMid) out.residualMid = concatTokens(residualMid, 1, "concatResults");
  const deltanet = all((r) => r.deltanet);
  if (deltanet) out.deltanet = DeltaNetTrace.concat(deltanet);
  const attention = all((r) => r.attention);
  if (attention) out.attention = AttentionTrace.concat(attention);
  const attentionGate = all((r) => r.attentionGate);
  if (attentionGate) out.attentionGate = AttentionGateTrace.concat(attentionGate);
  return out;
}

/** The hook points every call captured, token after token ([n, ...] values; attn.probs excluded). */
function concatCaches(results: ForwardResult[]): ActivationCache {
  const names = results[0].cache.names().filter((name) => !name.endsWith(".attn.probs") && results.every((r) => r.cache.has(name)));
  return new ActivationCache(names.map((name) => [name, concatTokens(results.map((r) => r.cache.get(name)), 0, "concatResults")]));
}
