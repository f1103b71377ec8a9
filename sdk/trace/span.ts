// Which tokens a trace covers: the ids fed and their absolute positions in the session.
export interface TokenSpan {
  /** Token ids fed by the call, in order. */
  ids: Int32Array;
  /** Absolute position of the first of them. */
  start: number;
}

export function positionsOf(span: TokenSpan): number[] {
  return Array.from(span.ids, (_, i) => span.start + i);
}
