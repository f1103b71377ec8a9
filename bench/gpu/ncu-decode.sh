#!/usr/bin/env bash
# Nsight Compute (ncu) over one decode step's kernels: per kernel its grid, duration,
# DRAM throughput, occupancy and issue rate, after `bench/gpu/h200-bench.sh` has built the tools and
# written the checkpoint. Usage: bench/gpu/ncu-decode.sh [SYNTH_DIR] [KERNELS] [COUNT] > report.txt
set -euo pipefail
synth=${1:-/tmp/synth}
kernels=${2:-'gemv|moe_|route|attention|add_rms_norm|rms_norm|deltanet|conv_silu|argmax|embed|copy_words'}
count=${3:-80}
# Fewer sections profile faster: NCU_SECTIONS="SpeedOfLight" gives duration and DRAM throughput alone.
sections=()
for s in ${NCU_SECTIONS:-SpeedOfLight LaunchStats Occupancy WarpStateStats}; do sections+=(--section "$s"); done
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
# The warm-up prefill, decode and greedy step and the timed prefill come first: each is one
# forward's worth of kernels (about 600); skip them and the first decode step's first layers.
MOELENS_CUDA_PROFILE=1 "$ncu" -k "regex:$kernels" -s 2500 -c "$count" "${sections[@]}" build/cuda/moelens-gpu-bench speed "$synth" --backend cuda --prompt 16 \
  --decode 4 --warmup 1 2>&1 |
  awk 'function show() { if (name != "") { printf "%-18s %-22s %8s us  dram %6s%%  active/elapsed %s/%s  cyc/issue %s  regs %s  occ %s%%\n", name, grid, dur, dram, act, el, wc, reg, occ; fflush(); dur = dram = act = el = wc = reg = occ = "" } }
       /^  [a-zA-Z_:]+\(/ { show(); split($0, a, "("); name = a[1]; sub(/.*::/, "", name); grid = $0; sub(/.*\) \(/, "(", grid); sub(/, Context.*/, "", grid) }
       /Duration/ { dur = $NF } /DRAM Throughput/ { dram = $NF } /SM Active Cycles/ { act = $NF } /Elapsed Cycles/ { el = $NF }
       /Warp Cycles Per Issued Instruction/ { wc = $NF } /Registers Per Thread/ { reg = $NF } /Achieved Occupancy/ { occ = $NF }
       END { show() }'
