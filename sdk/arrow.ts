// Arrow export: every trace has toArrow() (an apache-arrow Table in long form); these write such
// tables as Arrow IPC files or streams, which pandas (pyarrow) and polars read directly.
import * as fs from "node:fs";
import { Field, FixedSizeList, Float32, Int32, makeData, makeVector, Table, tableFromArrays, tableToIPC, type Data, type DataType, type Vector } from "apache-arrow";

/** Columns of equal length; string columns may hold null where a value is unknown. */
export type ArrowColumns = Record<string, Int32Array | Float32Array | Float64Array | string[] | (string | null)[]>;

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

/**
 * A column of nested fixed-size lists over row-major values: `dims` [a, b] gives rows of a lists of b
 * numbers (pyarrow: `column.flatten().flatten().to_numpy().reshape(-1, a, b)`; DuckDB: `col[i][j]`).
 */
export function fixedSizeListVector(values: Int32Array | Float32Array, dims: number[]): Vector {
  const width = dims.reduce((a, b) => a * b, 1);
  if (dims.length === 0 || width === 0 || values.length % width !== 0) {
    throw new Error(`fixedSizeListVector: ${values.length} values do not make rows of [${dims.join(", ")}]`);
  }
  let data: Data<DataType> =
    values instanceof Int32Array ? makeData({ type: new Int32(), data: values }) : makeData({ type: new Float32(), data: values });
  for (let d = dims.length - 1; d >= 0; d--) {
    const type = new FixedSizeList(dims[d], new Field("item", data.type, false));
    data = makeData({ type, length: data.length / dims[d], nullCount: 0, child: data });
  }
  return makeVector(data);
}
