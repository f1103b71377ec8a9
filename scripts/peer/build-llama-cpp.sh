#!/usr/bin/env bash
# Builds the llama.cpp peer (llama-bench and our llama-probe) from the llama.cpp source that the npm
# package node-llama-cpp ships as a git bundle, in a folder outside the repository.
# llama.cpp's source and binaries must never enter the repository.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/peer/build-llama-cpp.sh [--dir DIR] [--jobs N]

Unpacks node-llama-cpp@3.22.1's llama.cpp source into DIR/src (default ~/.cache/moelens/llama.cpp),
builds DIR/build/bin/llama-bench with the CPU flags of docs/performance.md (GGML_NATIVE off,
AVX2/FMA/F16C/AVX-512 on, AMX off: native builds compile AMX code that dies with SIGILL on VMs
without AMX) and compiles scripts/peer/llama-probe.cpp against it into DIR/build/bin/llama-probe.
Steps already done (unpacked source, configured build) are reused.

Environment: LLAMA_EXTRA_CMAKE  extra cmake -D flags (e.g. "-DGGML_AVX512_VNNI=ON"); default none.
EOF
}

NODE_LLAMA_CPP=node-llama-cpp@3.22.1
dir="$HOME/.cache/moelens/llama.cpp"
jobs=$(nproc)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    *) echo "build-llama-cpp.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case "$dir/" in
  "$repo"/*) echo "build-llama-cpp.sh: --dir $dir is inside the repository; use a folder outside it" >&2; exit 2 ;;
esac

if [[ ! -f "$dir/src/CMakeLists.txt" ]]; then
  echo "== unpacking $NODE_LLAMA_CPP's llama.cpp bundle into $dir/src"
  (cd "$dir" && npm pack --silent "$NODE_LLAMA_CPP" >/dev/null)
  tarball=$(ls "$dir"/node-llama-cpp-*.tgz | head -1)
  tar -xzf "$tarball" -C "$dir" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
  rm -rf "$dir/src"
  git -c advice.detachedHead=false clone --quiet "$dir/package/llama/gitRelease.bundle" "$dir/src"
fi
echo "== llama.cpp $(git -C "$dir/src" log -1 --format='%h (%cs)')"

if [[ ! -f "$dir/build/CMakeCache.txt" ]]; then
  # shellcheck disable=SC2086  # LLAMA_EXTRA_CMAKE is a list of flags
  cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF ${LLAMA_EXTRA_CMAKE:-}
fi
cmake --build "$dir/build" --target llama-bench llama -j "$jobs"

# Our probe: greedy tokens and logits for given ids, to compare llama.cpp with moelens.
c++ -O2 -std=c++17 -I"$dir/src/include" -I"$dir/src/ggml/include" "$repo/scripts/peer/llama-probe.cpp" \
  -L"$dir/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$dir/build/bin" -o "$dir/build/bin/llama-probe"
echo "== built $dir/build/bin/llama-bench and $dir/build/bin/llama-probe"
