#!/usr/bin/env bash
# Writes the llama.cpp peer's GGUF of a checkpoint on a machine without Node: runs
# scripts/peer/gguf-from-checkpoint.py with one worker per core, with the gguf-py of the llama.cpp
# source subset (.peer/llama-cpp-src.tar.xz, unpacked by bench/gpu/llama-cuda.sh or here).
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: bench/gpu/peer-gguf.sh [--src-tar FILE] [--src-dir DIR] [--jobs N] [--type T] CHECKPOINT_DIR OUT.gguf

Converts CHECKPOINT_DIR (MLX or HF qwen3_5_moe) into OUT.gguf (qwen35moe, --type q4_0 by default;
q8_0, f16, f32) with N worker processes (default: nproc), using DIR/gguf-py (default
/tmp/llama-src/gguf-py); when DIR has none, gguf-py is unpacked there from FILE (default
.peer/llama-cpp-src.tar.xz). Needs python3 with numpy. Prints the time taken.
USAGE
}

src_tar=.peer/llama-cpp-src.tar.xz
src_dir=/tmp/llama-src
jobs=$(nproc)
type=q4_0
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --src-tar) src_tar="$2"; shift 2 ;;
    --src-dir) src_dir="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --type) type="$2"; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    -*) echo "peer-gguf.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) args+=("$1"); shift ;;
  esac
done

die() { echo "peer-gguf.sh: $*" >&2; exit 1; }
[[ ${#args[@]} -eq 2 ]] || { usage >&2; exit 2; }
ckpt=${args[0]} out=${args[1]}
[[ -f "$ckpt/config.json" ]] || die "$ckpt has no config.json (not a checkpoint folder)"
python3 -c 'import numpy' 2>/dev/null || die "python3 with numpy is needed"
repo=$(cd "$(dirname "$0")/../.." && pwd)

if [[ ! -f "$src_dir/gguf-py/gguf/__init__.py" ]]; then
  [[ -f "$src_tar" ]] || die "no $src_dir/gguf-py and no $src_tar (run scripts/peer/llama-cpp-subset.sh and copy .peer/ with the working tree)"
  mkdir -p "$src_dir"
  tar -xJf "$src_tar" -C "$src_dir" gguf-py LLAMA_CPP_VERSION
fi

t0=$(date +%s)
python3 "$repo/scripts/peer/gguf-from-checkpoint.py" "$ckpt" "$out" --type "$type" --jobs "$jobs" \
  --gguf-py "$src_dir/gguf-py"
echo "== wrote $out in $(( $(date +%s) - t0 )) s ($jobs jobs)"
