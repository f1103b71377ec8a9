#!/usr/bin/env bash
# Decode speed of the CUDA backend built with other GEMV shapes (shaders/params.h: GEMV_ROWS,
# GEMV_UNROLL, GEMV_TARGET_THREADGROUPS, MOE_DOWN_UNROLL, GEMV_SIMDGROUPS/GEMV_THREADS), on a CUDA GPU after
# `bench/gpu/h200-bench.sh` has written the checkpoint. Each variant is a list of -D definitions;
# the variants build in parallel, then each runs `moelens-gpu-bench speed` in turn.
# Usage: bench/gpu/gemv-sweep.sh SYNTH_DIR OUT_DIR "GEMV_ROWS=4u" "GEMV_UNROLL=8u" ...
set -euo pipefail
synth=$1 out=$2
shift 2
mkdir -p "$out"
jobs=$(nproc)
per=$(( jobs / $# > 1 ? jobs / $# : 1 ))
i=0
for variant in "$@"; do
  flags=""
  for d in $variant; do flags+=" -D$d"; done
  (cmake -S native -B "build/sweep$i" -DCMAKE_BUILD_TYPE=Release -DMOELENS_CUDA=ON -DMOELENS_GPU_CHECK=ON \
     -DMOELENS_METAL=OFF -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_CUDA_FLAGS=$flags" &&
   cmake --build "build/sweep$i" -j "$per" --target moelens-gpu-bench) > "$out/build$i.log" 2>&1 &
  i=$((i + 1))
done
wait
i=0
for variant in "$@"; do
  echo "== $variant"
  timeout 120 "build/sweep$i/moelens-gpu-bench" speed "$synth" --backend cuda --prompt 64 --decode 64 \
    --peak-gbps 4800 2>&1 | grep -E "token kept|reads" || echo "FAILED (build/sweep$i, $out/build$i.log)"
  i=$((i + 1))
done
