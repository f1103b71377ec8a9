#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction sampling.

Reads the SASS view of a report taken with the SourceCounters section:

    MOELENS_CUDA_GRAPH=0 ncu --kernel-name regex:"gemm_q4$|moe_gate_up_tiled_q4_short" -c 2 \\
        --section SourceCounters --section WarpStateStats -o prompt \\
        build/cuda/moelens-gpu-bench prefill CHECKPOINT_DIR --backend cuda --prompts 512 --repeat 1 --compare-max 0
    ncu -i prompt.ncu-rep --page source --csv --print-source sass > prompt-sass.csv
    bench/gpu/ncu-stalls.py prompt-sass.csv

and prints, per profiled launch: the share of the samples by stall reason, the executed instructions by
opcode, the regions of the code (runs of consecutive instructions executed equally often: a loop body,
a branch taken once per K-step or once per stage) that hold at least --min-share of the samples, and
the instructions with the most samples and their main reasons. Needs Python 3 alone.
"""
import argparse
import collections
import csv
import signal
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def launches(rows):
    """(kernel name, header, instruction rows) per launch in the CSV."""
    i = 0
    while i < len(rows):
        if rows[i] and rows[i][0] == "Kernel Name":
            name = rows[i][1].split("(")[0]
            header = rows[i + 1]
            j = i + 2
            while j < len(rows) and not (rows[j] and rows[j][0] == "Kernel Name"):
                j += 1
            yield name, header, rows[i + 2 : j]
            i = j
        else:
            i += 1


def opcode(source):
    words = source.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def report(name, header, body, args):
    col = {h: k for k, h in enumerate(header)}
    missing = [c for c in (SAMPLES, EXECUTED, "Source", "Address") if c not in col]
    if missing:
        sys.exit(f"ncu-stalls.py: {name}: the CSV has no column {missing[0]!r} (take the report with --section SourceCounters)")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(row, column):
        value = row[col[column]]
        return int(value) if value not in ("", "-") else 0

    total = sum(num(r, SAMPLES) for r in body) or 1
    executed = sum(num(r, EXECUTED) for r in body) or 1
    print(f"== {name}: {len(body)} instructions, {total} samples, {executed} warp instructions executed")

    by_reason = collections.Counter({s: sum(num(r, s) for r in body) for s in reasons})
    print("stall reasons: " + ", ".join(f"{s[6:]} {100 * v / total:.1f} %" for s, v in by_reason.most_common(10) if v))

    mix = collections.Counter()
    for r in body:
        mix[opcode(r[col["Source"]])] += num(r, EXECUTED)
    print("executed: " + ", ".join(f"{op} {100 * v / executed:.1f} %" for op, v in mix.most_common(12)))

    print(f"regions with at least {args.min_share:g} % of the samples (address, times each instruction ran, instructions):")
    region = None
    for r in body + [None]:
        count = num(r, EXECUTED) if r else None
        if region and (r is None or count != region["count"]):
            if 100 * region["samples"] / total >= args.min_share:
                ops = ", ".join(f"{op} {n}" for op, n in region["ops"].most_common(6))
                print(f"  {region['start'][-6:]}  x{region['count']:<9d} {region['size']:4d} instr  "
                      f"{100 * region['samples'] / total:5.1f} %  ({ops})")
            region = None
        if r is None:
            break
        if region is None:
            region = {"start": r[col["Address"]], "count": count, "size": 0, "samples": 0, "ops": collections.Counter()}
        region["size"] += 1
        region["samples"] += num(r, SAMPLES)
        region["ops"][opcode(r[col["Source"]])] += 1

    print(f"top {args.top} instructions by samples:")
    for r in sorted(body, key=lambda r: -num(r, SAMPLES))[: args.top]:
        main = sorted(((num(r, s), s[6:]) for s in reasons), reverse=True)[:2]
        why = ", ".join(f"{s} {v}" for v, s in main if v)
        print(f"  {r[col['Address']][-6:]} {100 * num(r, SAMPLES) / total:5.1f} %  x{num(r, EXECUTED):<9d} "
              f"{r[col['Source']].strip()[:56]:56s} {why}")
    print()


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", help="ncu -i REPORT --page source --csv --print-source sass output")
    parser.add_argument("--kernel", default="", help="only launches whose kernel name contains this")
    parser.add_argument("--min-share", type=float, default=2.0, help="the smallest region shown, in %% of the samples")
    parser.add_argument("--top", type=int, default=12, help="how many instructions to list")
    args = parser.parse_args()
    try:
        with open(args.csv, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        sys.exit(f"ncu-stalls.py: {e}")
    found = False
    previous = None
    for name, header, body in launches(rows):
        # ncu prints each launch's listing twice in this view; show it once.
        if args.kernel in name and (name, body) != previous:
            found = True
            report(name, header, body, args)
        previous = (name, body)
    if not found:
        sys.exit(f"ncu-stalls.py: no launch{' of ' + repr(args.kernel) if args.kernel else ''} in {args.csv}")


if __name__ == "__main__":
    main()
