#!/usr/bin/env bash
# The benchmark run on an NVIDIA H200 (or any CUDA GPU with nvcc, cmake and Python with numpy; Node is
# not needed), from the repository root: builds the CUDA backend, writes the synthetic full-shape
# checkpoint, checks every kernel and every fixture against the CPU backend (both GPU precisions),
# times prefill at every prompt length (fp16 tiled kernels against the fp32 decode kernels, with a
# per-kernel profile at 4,096 tokens), decode after a short prompt (both precisions) and at depth (after prompts of
# --depths tokens); with --peer, also builds llama.cpp (CUDA), converts the same weights to a Q4_0 GGUF
# and runs llama-bench in the same call (prefill, decode at depth). Logs go to --out, and every figure
# to --out/summary.txt (bench/gpu/summary.sh).
#
# Needs .synth/full.json (made where Node is: npx tsx scripts/synth-checkpoint.ts --manifest
# .synth/full.json) and, with --peer, .peer/llama-cpp-src.tar.xz (scripts/peer/llama-cpp-subset.sh):
# both are git-ignored, so copy them with the working tree.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/gpu/h200-bench.sh [--out DIR] [--synth DIR] [--peer] [--skip-checks] [--decode N] [--depths N,N]

  --out DIR       logs and results (default /tmp/h200-bench)
  --synth DIR     where the synthetic checkpoint is written, or reused if complete (default /tmp/synth)
  --peer          also build llama.cpp, write the Q4_0 GGUF and run llama-bench (same call)
  --skip-checks   skip moelens-gpu-check and the fixture agreement
  --decode N      decode steps of the speed runs (default 128)
  --depths N,N    prompt lengths before the decode-at-depth runs, ours and llama-bench's -d (default 4096,32768)
EOF
}

out=/tmp/h200-bench
synth=/tmp/synth
peer=0
checks=1
decode=128
depths=(4096 32768)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --synth) synth="$2"; shift 2 ;;
    --peer) peer=1; shift ;;
    --skip-checks) checks=0; shift ;;
    --decode) decode="$2"; shift 2 ;;
    --depths) IFS=, read -r -a depths <<< "$2"; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    *) echo "h200-bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for depth in "${depths[@]}"; do
  [[ $depth =~ ^[1-9][0-9]*$ ]] || { echo "h200-bench.sh: --depths takes positive token counts, got '$depth'" >&2; exit 2; }
done
[[ -f .synth/full.json ]] || { echo "h200-bench.sh: .synth/full.json is missing (copy it with the working tree)" >&2; exit 2; }
if [[ $peer == 1 && ! -f .peer/llama-cpp-src.tar.xz ]]; then
  echo "h200-bench.sh: --peer needs .peer/llama-cpp-src.tar.xz (copy it with the working tree)" >&2
  exit 2
fi
mkdir -p "$out"
jobs=$(nproc)
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/steps.log"; }

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv > "$out/gpu.txt" 2>&1 || true

# 1. In the background: the checkpoint (unless already complete) and, with --peer, llama.cpp's build.
synth_pid=""
if [[ ! -f "$synth/config.json" ]]; then
  stamp "writing the synthetic checkpoint to $synth"
  python3 scripts/synth_checkpoint.py .synth/full.json "$synth" --jobs 4 > "$out/synth.log" 2>&1 &
  synth_pid=$!
fi
llama_pid=""
if [[ $peer == 1 ]]; then
  stamp "building llama.cpp (CUDA) in the background"
  nice -n 5 bench/gpu/llama-cuda.sh --jobs "$((jobs * 3 / 4))" > "$out/llama-build.log" 2>&1 &
  llama_pid=$!
fi

# 2. Our CUDA build.
stamp "building moelens (CUDA)"
cmake -S native -B build/cuda -DCMAKE_BUILD_TYPE=Release -DMOELENS_CUDA=ON -DMOELENS_GPU_CHECK=ON \
  -DMOELENS_METAL=OFF -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1
cmake --build build/cuda -j "$jobs" --target moelens-gpu-check moelens-gpu-bench moelens-cuda-matrix-check \
  >> "$out/build.log" 2>&1
stamp "built"

# 3. Kernels and fixtures against the CPU backend. The agreement rule is a share (top-1 at >= 99.5 % of
# positions): 1,024 positions resolve it to 0.1 %, where at 256 a single near-tie is 0.39 %.
if [[ $checks == 1 ]]; then
  build/cuda/moelens-cuda-matrix-check > "$out/matrix-check.txt" 2>&1 || stamp "matrix check FAILED"
  build/cuda/moelens-gpu-check --runtime cuda --seed "$RANDOM" > "$out/gpu-check.txt" 2>&1 || stamp "gpu-check FAILED"
  stamp "gpu-check: $(grep -c ' ok' "$out/gpu-check.txt" || true) kernels ok"
  for precision in fp16 fp32; do
    timeout 300 build/cuda/moelens-gpu-bench agree test/fixtures/t1/hf test/fixtures/t1/mlx test/fixtures/t2/mlx \
      test/fixtures/t3/hf models/moelens-tiny --backend cuda --precision "$precision" --positions 1024 --decode 64 \
      > "$out/agree-$precision.txt" 2>&1 || stamp "agree ($precision) FAILED"
  done
  stamp "agree done"
fi

# 4. The GGUF of the same weights (needs the checkpoint) while llama.cpp may still build.
if [[ -n $synth_pid ]]; then wait "$synth_pid"; stamp "checkpoint written"; fi
if [[ $peer == 1 ]]; then
  stamp "writing the Q4_0 GGUF"
  # Its own gguf-py copy: the llama.cpp build may still be unpacking /tmp/llama-src.
  bench/gpu/peer-gguf.sh --src-dir /tmp/llama-gguf --jobs "$((jobs / 2))" "$synth" /tmp/synth-q4_0.gguf > "$out/gguf.log" 2>&1
  stamp "GGUF written"
fi

# 5. Our prefill at every prompt length (fp16 against fp32 up to 4,096 tokens), a per-kernel profile of
# a 4,096-token prefill, then decode: graphs (the reported figure) and a per-kernel profile.
stamp "moelens prefill"
timeout 400 build/cuda/moelens-gpu-bench prefill "$synth" --backend cuda --prompts 1,2,4,8,16,32,64,128,512,4096,32768 \
  --repeat 2 --compare-max 4096 > "$out/prefill.txt" 2>&1 || stamp "prefill FAILED"
MOELENS_CUDA_PROFILE=1 timeout 200 build/cuda/moelens-gpu-bench prefill "$synth" --backend cuda --prompts 4096 \
  --repeat 1 --compare-max 0 > "$out/prefill-profile.txt" 2>&1 || stamp "prefill profile FAILED"
MOELENS_CUDA_GRAPH=0 timeout 200 build/cuda/moelens-gpu-bench prefill "$synth" --backend cuda --prompts 16,64,128,512 \
  --repeat 2 --compare-max 512 > "$out/prefill-no-graphs.txt" 2>&1 || stamp "prefill without graphs FAILED"
stamp "moelens prefill done"
stamp "moelens speed"
timeout 300 build/cuda/moelens-gpu-bench speed "$synth" --backend cuda --prompt 256 --decode "$decode" \
  --peak-gbps 4800 > "$out/speed.txt" 2>&1 || stamp "speed FAILED"
# The same at the fp16 precision: decode's 4-bit GEMVs on int16 activations (docs/metal.md, "Decode in int16").
timeout 300 build/cuda/moelens-gpu-bench speed "$synth" --backend cuda --precision fp16 --prompt 256 --decode "$decode" \
  --peak-gbps 4800 > "$out/speed-fp16.txt" 2>&1 || stamp "speed at fp16 FAILED"
stamp "moelens speed done"
MOELENS_CUDA_PROFILE=1 timeout 300 build/cuda/moelens-gpu-bench speed "$synth" --backend cuda --prompt 256 \
  --decode 32 --peak-gbps 4800 > "$out/profile.txt" 2>&1 || stamp "profile FAILED"
stamp "profile done"
# Decode at depth, at the fp16 precision: the prompt (prefilled in chunks of PREFILL_CHUNK, on the tiled
# kernels: at fp32 a 32,768-token prompt takes about a minute; decode on the int16 GEMVs) fills the
# KV cache that every decoded token's attention then reads; speed prints the bytes per token (weights,
# state, KV at the depth) and their fraction of 4.8 TB/s. A per-kernel profile at 4,096.
for depth in "${depths[@]}"; do
  timeout 400 build/cuda/moelens-gpu-bench speed "$synth" --backend cuda --precision fp16 --prompt "$depth" \
    --decode "$decode" --peak-gbps 4800 > "$out/speed-$depth.txt" 2>&1 || stamp "speed at depth $depth FAILED"
  stamp "decode at depth $depth: $(grep -h 'token kept on the device' "$out/speed-$depth.txt" | sed 's/, digest.*//')"
  stamp "  $(grep -h 'decode reads' "$out/speed-$depth.txt" || true)"
done
MOELENS_CUDA_PROFILE=1 timeout 300 build/cuda/moelens-gpu-bench speed "$synth" --backend cuda --precision fp16 \
  --prompt 4096 --decode 32 --peak-gbps 4800 > "$out/profile-4096.txt" 2>&1 || stamp "profile at 4096 FAILED"
stamp "moelens decode at depth done"

# 6. llama.cpp on the same weights, same call. -oe jsonl adds every repetition's tok/s (lines starting
# with '{' in the logs), so that summary.sh can set a best against our best and a mean against our mean.
if [[ $peer == 1 ]]; then
  wait "$llama_pid" || { stamp "llama.cpp build FAILED"; exit 1; }
  stamp "llama-bench"
  timeout 300 /tmp/llama-build/bin/llama-bench -m /tmp/synth-q4_0.gguf -ngl 99 -p 512,4096,32768 -n 128 -r 3 \
    -oe jsonl > "$out/llama-bench.txt" 2>&1 || stamp "llama-bench FAILED"
  stamp "llama-bench done"
  # Decode after a prompt of each depth (-d: the context filled before the 128 timed tokens).
  depth_list=$(IFS=,; echo "${depths[*]}")
  timeout 600 /tmp/llama-build/bin/llama-bench -m /tmp/synth-q4_0.gguf -ngl 99 -p 0 -n 128 -d "$depth_list" -r 3 \
    -oe jsonl > "$out/llama-bench-depth.txt" 2>&1 || stamp "llama-bench at depth FAILED"
  while read -r row; do stamp "llama.cpp: $row"; done < <(grep -h 'tg128 @ d' "$out/llama-bench-depth.txt" || true)
  stamp "llama-bench at depth done"
fi
stamp "all done"
# Every figure in one file (and on stdout): OUT/summary.txt.
bash "$(dirname "$0")/summary.sh" "$out" | tee "$out/summary.txt"
