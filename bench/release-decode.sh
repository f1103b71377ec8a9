#!/usr/bin/env bash
# CPU decode of this tree against an earlier release, in the same run: builds moelens-run from a source
# archive of the release (`git archive REV native shaders | gzip > FILE`) and from this tree, then
# decodes the same synthetic prompt with each, alternating, ROUNDS times, with nothing captured.
# Prints decode tok/s per round and build, and the median ratio (this tree / release).
#
# Usage: bench/release-decode.sh RELEASE_SRC.tar.gz CHECKPOINT_DIR [ROUNDS] [PRECISIONS]
#   PRECISIONS  comma-separated moelens-run precisions (default fp32,int24)
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,9p' "$0"; exit 2; }
archive=$1 model=$2 rounds=${3:-3} precisions=${4:-fp32,int24}
work=$(mktemp -d)
jobs=$(nproc)
mkdir -p "$work/release"
tar -xzf "$archive" -C "$work/release"
build() {  # SRC_ROOT BUILD_DIR
  cmake -S "$1/native" -B "$2" -DCMAKE_BUILD_TYPE=Release -DMOELENS_TOOLS=ON -DMOELENS_METAL=OFF > "$2.log" 2>&1
  cmake --build "$2" -j "$jobs" --target moelens-run >> "$2.log" 2>&1
}
build "$work/release" "$work/build-release" &
build "$(pwd)" "$work/build-tree"
wait
tok_s() { sed -n 's/.*"decode_tok_s":\([0-9.]*\).*/\1/p'; }
for p in ${precisions//,/ }; do
  ratios=()
  for r in $(seq 1 "$rounds"); do
    rel=$("$work/build-release/tools/moelens-run" "$model" --prompt 128 --decode 32 --precision "$p" | tok_s)
    cur=$("$work/build-tree/tools/moelens-run" "$model" --prompt 128 --decode 32 --precision "$p" | tok_s)
    ratio=$(awk -v a="$cur" -v b="$rel" 'BEGIN { printf "%.3f", a / b }')
    ratios+=("$ratio")
    echo "$p round $r: release $rel tok/s, this tree $cur tok/s, ratio $ratio"
  done
  printf '%s\n' "${ratios[@]}" | sort -n | awk -v p="$p" '{ a[NR] = $1 } END { print p ": median ratio " a[int((NR + 1) / 2)] " over " NR " rounds" }'
done
rm -rf "$work"
