// Arrow export: every trace has toArrow() (an apache-arrow Table in long form); these write such
// tables as Arrow IPC files or streams, which pandas (pyarrow) and polars read directly.
import * as fs from "node:fs";
import { Table, tableFromArrays, tableToIPC } from "apache-arrow";

export type ArrowColumns = Record<string, Int32Array | Float32Array | Float64Array | string[]>;

/** Builds a Table from equal-length columns. */
export function arrowTable(columns: ArrowColumns): Table {
  const lengths = new Set(Object.values(columns).map((c) => c.length));
  if (lengths.size > 1) throw new Error(`arrowTable: columns differ in length (${[...lengths].join(", ")})`);
  return tableFromArrays(columns as Parameters<typeof tableFromArrays>[0]);
}

/** Writes an Arrow IPC file (`.arrow`, random access: pyarrow.ipc.open_file, polars.read_ipc). */
export function writeArrowFile(table: Table, path: string): void {
  fs.writeFileSync(path, tableToIPC(table, "file"));
}

/** Writes an Arrow IPC stream (`.arrows`: pyarrow.ipc.open_stream, polars.read_ipc_stream). */
export function writeArrowStream(table: Table, path: string): void {
  fs.writeFileSync(path, tableToIPC(table, "stream"));
}

/** The IPC bytes of a table, as a file or a stream. */
export function toArrowIPC(table: Table, format: "file" | "stream" = "file"): Uint8Array {
  return tableToIPC(table, format);
}
