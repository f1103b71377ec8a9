// The rows of the shard being filled: one row per token, with its prompt, position, id and text and
// the captured values. Preallocated for the shard's capacity, so memory is bounded by the shard size.
import { Table, vectorFromArray, Utf8, makeVector } from "apache-arrow";
import { fixedSizeListVector } from "../arrow";
import type { ForwardResult } from "../forward";
import type { CaptureColumn } from "./columns";
import type { PromptRecord } from "./prompts-file";

export class ShardBuffer {
  rows = 0;
  private readonly prompt: Int32Array;
  private readonly position: Int32Array;
  private readonly token: Int32Array;
  private readonly promptId: string[] = [];
  private readonly tokenText: (string | null)[] = [];
  private readonly values: (Int32Array | Float32Array)[];
  private readonly widths: number[];

  constructor(
    readonly capacity: number,
    private readonly columns: CaptureColumn[],
    private readonly withText: boolean,
  ) {
    this.prompt = new Int32Array(capacity);
    this.position = new Int32Array(capacity);
    this.token = new Int32Array(capacity);
    this.widths = columns.map((c) => c.dims.reduce((a, b) => a * b, 1));
    this.values = columns.map((c, i) => (c.type === "int32" ? new Int32Array(capacity * this.widths[i]) : new Float32Array(capacity * this.widths[i])));
  }

  get free(): number {
    return this.capacity - this.rows;
  }

  /** Appends the tokens of one forward call over `record` (texts: each token's text, when known). */
  append(record: PromptRecord, result: ForwardResult, texts?: string[]): void {
    const T = result.tokens;
    if (T > this.free) throw new Error(`corpus trace: ${T} tokens do not fit in the ${this.free} rows left in the shard`);
    const base = this.rows;
    for (let t = 0; t < T; t++) {
      this.prompt[base + t] = record.index;
      this.position[base + t] = result.span.start + t;
      this.token[base + t] = result.span.ids[t];
      this.promptId.push(record.id);
      if (this.withText) this.tokenText.push(texts?.[t] ?? null);
    }
    this.columns.forEach((column, c) => {
      const tensor = column.take(result);
      const outer = column.dims[0];
      const inner = this.widths[c] / outer;
      const out = this.values[c];
      for (let t = 0; t < T; t++)
        for (let o = 0; o < outer; o++) {
          out.set(tensor.data.subarray((o * T + t) * inner, (o * T + t + 1) * inner), ((base + t) * outer + o) * inner);
        }
    });
    this.rows += T;
  }

  /** The buffered rows as an Arrow table. */
  toTable(): Table {
    const n = this.rows;
    const columns: Record<string, ReturnType<typeof makeVector>> = {
      prompt: makeVector(this.prompt.subarray(0, n)),
      prompt_id: vectorFromArray(this.promptId, new Utf8()),
      position: makeVector(this.position.subarray(0, n)),
      token: makeVector(this.token.subarray(0, n)),
    };
    if (this.withText) columns.token_text = vectorFromArray(this.tokenText, new Utf8());
    this.columns.forEach((column, c) => {
      columns[column.name] = fixedSizeListVector(this.values[c].subarray(0, n * this.widths[c]), column.dims);
    });
    return new Table(columns);
  }

  clear(): void {
    this.rows = 0;
    this.promptId.length = 0;
    this.tokenText.length = 0;
  }
}
