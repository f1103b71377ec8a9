#!/usr/bin/env bash
# Every figure of a bench/gpu/h200-bench.sh output folder in one short text: the GPU, the kernel checks'
# verdict, each fixture's agreement, the prefill table's rows and every timed run, decode at every depth
# (tok/s, bytes per token, launches), llama-bench's rows and repetitions, and any step that failed.
# h200-bench.sh writes it to OUT/summary.txt at the end, so that the figures travel together when only a
# few files of a run are kept.
set -euo pipefail

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  echo "Usage: bench/gpu/summary.sh OUT_DIR   (an h200-bench.sh --out folder)" >&2
  [[ $# -eq 1 ]] && exit 0 || exit 2
fi
out=$1
[[ -d $out ]] || { echo "summary.sh: no folder '$out'" >&2; exit 2; }

# section TITLE PATTERN FILE...: the lines of the files that match, under the title (nothing when none).
section() {
  local title=$1 pattern=$2 lines
  shift 2
  lines=$(grep -hE "$pattern" "$@" 2>/dev/null || true)
  [[ -z $lines ]] || printf '%s\n%s\n\n' "$title" "$lines"
}

section "GPU" "MiB" "$out/gpu.txt"
section "Kernel cases (moelens-gpu-check)" "kernels, .* failed cases" "$out/gpu-check.txt"
for f in "$out"/agree-*.txt; do
  [[ -f $f ]] && section "Agreement with the CPU backend ($(basename "$f" .txt | sed 's/^agree-//'))" "teacher-forced" "$f"
done
section "Prefill (moelens-gpu-bench prefill)" "^prompt +\||^ +[0-9]+ \||^fp16 runs, " "$out/prefill.txt"
for f in "$out"/speed.txt "$out"/speed-*.txt; do
  [[ -f $f ]] && section "Decode ($(basename "$f" .txt))" \
    "^prefill: |token kept on the device|^decode reads|^kernel launches per decoded token" "$f"
done
section "llama.cpp (llama-bench)" "^\| model|\| +(pp|tg)[0-9]+( @ d[0-9]+)? +\|" "$out"/llama-bench*.txt
# llama-bench's repetitions (its -oe jsonl lines): each test's tok/s, best and mean.
repetitions=$(awk '/^\{"build_commit"/ {
    match($0, /"n_prompt": [0-9]+/); p = substr($0, RSTART + 12, RLENGTH - 12)
    match($0, /"n_gen": [0-9]+/); g = substr($0, RSTART + 9, RLENGTH - 9)
    match($0, /"n_depth": [0-9]+/); d = RLENGTH > 0 ? substr($0, RSTART + 11, RLENGTH - 11) : 0
    match($0, /"samples_ts": \[[^]]*\]/); n = split(substr($0, RSTART + 15, RLENGTH - 16), ts, ", ")
    best = 0; sum = 0; list = ""
    for (i = 1; i <= n; ++i) { v = ts[i] + 0; best = v > best ? v : best; sum += v; list = list sprintf(" %.2f", v) }
    name = (g > 0 ? "tg" g : "pp" p) (d > 0 ? " @ d" d : "")
    if (n > 0) printf "%s, tok/s:%s (best %.2f, mean %.2f)\n", name, list, best, sum / n
  }' "$out"/llama-bench*.txt 2>/dev/null || true)
[[ -z $repetitions ]] || printf '%s\n%s\n\n' "llama.cpp's repetitions" "$repetitions"
section "Failed steps" "FAILED" "$out/steps.log"
