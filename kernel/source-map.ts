// Reads the source map TypeScript writes for a cell, to report errors at TypeScript lines, not at
// the lines of the generated JavaScript.

export interface Position {
  /** 0-based */
  line: number;
  /** 0-based */
  column: number;
}

// Per generated line: [generatedColumn, sourceLine, sourceColumn] segments, by column.
type Segments = [number, number, number][];

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

function decodeVlq(text: string, at: { i: number }): number {
  let value = 0;
  let shift = 0;
  for (;;) {
    const digit = BASE64.indexOf(text[at.i++]);
    if (digit < 0) throw new Error(`source map: bad base64 digit at ${at.i - 1}`);
    value += (digit & 31) << shift;
    shift += 5;
    if ((digit & 32) === 0) break;
  }
  return value & 1 ? -(value >>> 1) : value >>> 1;
}

export class SourceMap {
  private readonly lines: Segments[] = [];

  /** `json`: a version 3 source map with a single source. */
  constructor(json: string) {
    const mappings = (JSON.parse(json) as { mappings: string }).mappings;
    let sourceLine = 0;
    let sourceColumn = 0;
    for (const line of mappings.split(";")) {
      const segments: Segments = [];
      let column = 0;
      for (const segment of line.split(",")) {
        if (segment === "") continue;
        const at = { i: 0 };
        column += decodeVlq(segment, at);
        if (at.i >= segment.length) continue; // a segment with no source
        decodeVlq(segment, at); // source index: always 0
        sourceLine += decodeVlq(segment, at);
        sourceColumn += decodeVlq(segment, at);
        segments.push([column, sourceLine, sourceColumn]);
      }
      this.lines.push(segments);
    }
  }

  /** The source position of a generated one: the closest mapped segment at or before it on its line. */
  original(generated: Position): Position | undefined {
    const segments = this.lines[generated.line];
    if (!segments || segments.length === 0) return undefined;
    let best = segments[0];
    for (const s of segments) {
      if (s[0] > generated.column) break;
      best = s;
    }
    // Within a segment, columns advance together (TypeScript maps token by token).
    return { line: best[1], column: best[2] + Math.max(0, generated.column - best[0]) };
  }
}
