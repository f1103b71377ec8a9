#!/usr/bin/env bash
# Packs the part of the llama.cpp source (scripts/peer/build-llama-cpp.sh) that a CUDA build of
# llama-bench needs (and gguf-py, for scripts/peer/gguf-from-checkpoint.py) into one small tar.xz that a
# CUDA machine without internet access can be given (docs/metal.md, "Benchmarking on a CUDA GPU"). The tarball goes to .peer/, which is ignored through
# .git/info/exclude: llama.cpp's source must never be committed.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/peer/llama-cpp-subset.sh [--src DIR] [--out FILE]

Packs CMakeLists.txt cmake common ggml gguf-py include src tools vendor licenses LICENSE of the
llama.cpp checkout DIR (default ~/.cache/moelens/llama.cpp/src, made by scripts/peer/build-llama-cpp.sh)
into FILE (default .peer/llama-cpp-src.tar.xz in the repository root), files at the top level of the
archive, without the parts a CUDA llama-bench build never configures (the other ggml backends,
tools/server and tools/ui). LLAMA_CPP_VERSION in the archive holds the commit and its build number,
which bench/gpu/llama-cuda.sh passes to cmake (the unpacked tree is no git checkout).
EOF
}

src="$HOME/.cache/moelens/llama.cpp/src"
repo=$(cd "$(dirname "$0")/../.." && pwd)
out="$repo/.peer/llama-cpp-src.tar.xz"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --src) src="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    *) echo "llama-cpp-subset.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

[[ -f "$src/CMakeLists.txt" && -d "$src/ggml/src/ggml-cuda" ]] ||
  { echo "llama-cpp-subset.sh: $src is not a llama.cpp source tree (run scripts/peer/build-llama-cpp.sh)" >&2; exit 1; }
git -C "$src" rev-parse --verify -q HEAD >/dev/null ||
  { echo "llama-cpp-subset.sh: $src is not a git checkout (the archive is taken from its HEAD)" >&2; exit 1; }
[[ -z "$(git -C "$src" status --porcelain --untracked-files=no)" ]] ||
  echo "llama-cpp-subset.sh: warning: $src has local changes; the archive holds HEAD, without them" >&2

keep=(CMakeLists.txt cmake common ggml gguf-py include src tools vendor licenses LICENSE)
drop=(tools/server tools/ui)
for b in cann et hexagon metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
  drop+=("ggml/src/ggml-$b")
done

commit=$(git -C "$src" rev-parse --short HEAD)
number=$(git -C "$src" rev-list --count HEAD)
date=$(git -C "$src" log -1 --format=%cs)

mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
case "$out" in
  "$repo/.peer/"*)  # ignored locally (not in .gitignore), so it can still be copied to a CUDA machine with the working tree
    grep -qxF '/.peer/' "$repo/.git/info/exclude" 2>/dev/null || echo '/.peer/' >> "$repo/.git/info/exclude" ;;
  "$repo"/*) echo "llama-cpp-subset.sh: warning: $out is inside the repository, outside the ignored .peer/" >&2 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$src" archive --format=tar -o "$tmp/src.tar" HEAD -- "${keep[@]}" "${drop[@]/#/:(exclude)}"
printf 'commit=%s\nbuild_number=%s\ndate=%s\n' "$commit" "$number" "$date" > "$tmp/LLAMA_CPP_VERSION"
tar -rf "$tmp/src.tar" -C "$tmp" --owner=0 --group=0 --mtime="$date" LLAMA_CPP_VERSION
xz -9 -T1 -c "$tmp/src.tar" > "$tmp/out.tar.xz"
mv "$tmp/out.tar.xz" "$out"
echo "llama-cpp-subset.sh: llama.cpp $commit ($date, build $number): $(tar -tJf "$out" | grep -vc '/$') files," \
     "$(du -k "$out" | cut -f1) KiB in $out"
