"""Reads the Arrow IPC files written by write.ts with pyarrow and pandas and compares every column
with the values the SDK recorded. Usage: python3 check.py DIR  (exits non-zero on any difference)."""
import json
import sys

import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

folder = sys.argv[1]
expected = json.load(open(f"{folder}/expected.json"))
failures = 0
for name, columns in expected.items():
    readers = {
        "pyarrow file": lambda: ipc.open_file(f"{folder}/{name}.arrow").read_all(),
        "pyarrow stream": lambda: ipc.open_stream(f"{folder}/{name}.arrows").read_all(),
        "pandas feather": lambda: pa.Table.from_pandas(pd.read_feather(f"{folder}/{name}.arrow")),
    }
    for reader, read in readers.items():
        table = read()
        for column, values in columns.items():
            got = table.column(column).to_pylist()
            ok = len(got) == len(values) and all(abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(b))) for a, b in zip(got, values))
            failures += not ok
            print(f"{name:9s} {reader:15s} {column:12s} rows={len(got):6d} {'ok' if ok else 'MISMATCH'}")
print(f"pyarrow {pa.__version__}, pandas {pd.__version__}: {failures} mismatches")
sys.exit(1 if failures else 0)
