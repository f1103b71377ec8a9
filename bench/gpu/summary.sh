#!/usr/bin/env bash
# Every figure of a bench/gpu/h200-bench.sh output folder in one short text: the GPU, the kernel checks'
# verdict, each fixture's agreement, the prefill table's rows, decode at every depth (tok/s, bytes per
# token, launches), llama-bench's rows, and any step that failed. h200-bench.sh writes it to
# OUT/summary.txt at the end, so that the figures travel together when only a few files of a run are kept.
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
section "Prefill (moelens-gpu-bench prefill)" "^prompt +\||^ +[0-9]+ \|" "$out/prefill.txt"
for f in "$out"/speed.txt "$out"/speed-*.txt; do
  [[ -f $f ]] && section "Decode ($(basename "$f" .txt))" \
    "^prefill: |token kept on the device|^decode reads|^kernel launches per decoded token" "$f"
done
section "llama.cpp (llama-bench)" "^\| model|\| +(pp|tg)[0-9]+( @ d[0-9]+)? +\|" "$out"/llama-bench*.txt
section "Failed steps" "FAILED" "$out/steps.log"
