#!/usr/bin/env bash
# Builds the llama.cpp CUDA peer (llama-bench only) on a CUDA machine without internet access, from the
# source subset that scripts/peer/llama-cpp-subset.sh packs (.peer/ is git-ignored; copy it with the
# working tree). Run from the repository root; see docs/metal.md, "Benchmarking on a CUDA GPU".
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: bench/gpu/llama-cuda.sh [--src-tar FILE] [--src-dir DIR] [--build-dir DIR] [--jobs N]

Unpacks FILE (default .peer/llama-cpp-src.tar.xz) into DIR (default /tmp/llama-src, replaced),
configures a Release CUDA build for sm_90 (Ninja if present, else make) in --build-dir (default
/tmp/llama-build; an existing build is reused) and builds only the llama-bench target with N jobs
(default: nproc). Configure and build output go to BUILD_DIR/build.log; the build time is printed.
Then, for example: BUILD_DIR/bin/llama-bench -m model.gguf -ngl 99 -p 512 -n 128 -r 3

Environment: LLAMA_EXTRA_CMAKE  extra cmake -D flags; default none.
USAGE
}

src_tar=.peer/llama-cpp-src.tar.xz
src_dir=/tmp/llama-src
build_dir=/tmp/llama-build
jobs=$(nproc)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --src-tar) src_tar="$2"; shift 2 ;;
    --src-dir) src_dir="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    *) echo "llama-cuda.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "llama-cuda.sh: $*" >&2; exit 1; }
[[ -f "$src_tar" ]] || die "$src_tar not found: run scripts/peer/llama-cpp-subset.sh and copy .peer/llama-cpp-src.tar.xz with the working tree"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
command -v nvcc >/dev/null || die "nvcc not found (PATH or /usr/local/cuda/bin)"
command -v cmake >/dev/null || die "cmake not found"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer, got '$jobs'"

if [[ -d "$src_dir" && -n "$(ls -A "$src_dir")" && ! -f "$src_dir/LLAMA_CPP_VERSION" ]]; then
  die "$src_dir is not empty and holds no unpacked llama.cpp subset; not replacing it"
fi
rm -rf "$src_dir"
mkdir -p "$src_dir" "$build_dir"
tar -xJf "$src_tar" -C "$src_dir"  # keeps the archive's mtimes, so a reused build does not recompile
[[ -f "$src_dir/CMakeLists.txt" && -f "$src_dir/LLAMA_CPP_VERSION" ]] || die "$src_tar is not a llama-cpp-subset.sh archive"
commit=$(sed -n 's/^commit=//p' "$src_dir/LLAMA_CPP_VERSION")
number=$(sed -n 's/^build_number=//p' "$src_dir/LLAMA_CPP_VERSION")
log="$build_dir/build.log"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
echo "== llama.cpp $commit: $src_dir -> $build_dir ($(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'), $jobs jobs, log $log)"

t0=$(date +%s)
# shellcheck disable=SC2086  # LLAMA_EXTRA_CMAKE is a list of flags
if ! { cmake -S "$src_dir" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
         -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF \
         -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
         -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
         -DLLAMA_BUILD_COMMIT="$commit" -DLLAMA_BUILD_NUMBER="$number" ${LLAMA_EXTRA_CMAKE:-} &&
       cmake --build "$build_dir" --target llama-bench -j "$jobs"; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  die "build failed after $(( $(date +%s) - t0 )) s (full log: $log)"
fi
t1=$(date +%s)
[[ -x "$build_dir/bin/llama-bench" ]] || die "no $build_dir/bin/llama-bench after the build (log: $log)"
echo "== built $build_dir/bin/llama-bench in $((t1 - t0)) s"
