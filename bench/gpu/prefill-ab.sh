#!/usr/bin/env bash
# Times prefill on the working tree and on variants of it (each a patch file, or several joined with
# '+'), in alternating rounds, on a CUDA machine without Node: builds the tree, then each variant in the
# same build folder (patch applied, build repeated, patch reversed), writes the synthetic checkpoint
# if it is not there yet, and runs `moelens-gpu-bench prefill` on every build in turn, round after
# round, so that drifts of the GPU's clock fall on all of them alike. Prints each build's mean tok/s,
# its ratio to the tree and the routing it gave (marked where it differs from the tree's); with
# --profile, also a per-kernel profile of each build; with --check, each build's kernel cases on the GPU.
set -euo pipefail
here=$(dirname "$0")

usage() {
  cat <<'EOF'
Usage: bench/gpu/prefill-ab.sh [--out DIR] [--synth DIR] [--rounds N] [--prompts N,N] [--profile] [--check N]
                              VARIANT...

  VARIANT        a patch file against the working tree (git diff output), or several joined by '+'
                 (applied in that order), e.g. fast-tiles.patch or a.patch+b.patch
  --out DIR      logs and results (default /tmp/prefill-ab)
  --synth DIR    the synthetic checkpoint, written from .synth/full.json if DIR has none (default /tmp/synth)
  --rounds N     rounds of every build (default 3)
  --prompts N,N  prompt lengths (default 512,4096)
  --profile      after the rounds, a per-kernel profile of every build (MOELENS_CUDA_PROFILE=1) and a
                 table of the main kernels' time per launch by build (OUT/kernels.txt)
  --check N      after the rounds, every build's kernel cases on the GPU (moelens-gpu-check --runtime
                 cuda) with seeds 1 to N, and a line per build and seed in OUT/checks.txt

Run from the repository root; the working tree is left as it was. Needs cmake, nvcc, patch and
python3 with numpy (for the checkpoint).
EOF
}

out=/tmp/prefill-ab
synth=/tmp/synth
rounds=3
prompts=512,4096
profile=0
check_seeds=0
variants=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --synth) synth="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --profile) profile=1; shift ;;
    --check) [[ $# -ge 2 ]] || { echo "prefill-ab.sh: --check takes a count of seeds" >&2; exit 2; }
      check_seeds="$2"; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    -*) echo "prefill-ab.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) variants+=("$1"); shift ;;
  esac
done
[[ ${#variants[@]} -gt 0 ]] || { echo "prefill-ab.sh: give at least one variant (see --help)" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "prefill-ab.sh: --rounds takes a positive count, got '$rounds'" >&2; exit 2; }
[[ $prompts =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "prefill-ab.sh: --prompts takes token counts like 512,4096, got '$prompts'" >&2; exit 2; }
[[ $check_seeds =~ ^[0-9]+$ ]] || { echo "prefill-ab.sh: --check takes a count of seeds, got '$check_seeds'" >&2; exit 2; }
apply() { local p; for p in ${1//+/ }; do patch -p1 -s < "$p"; done; }
reverse() { local p; for p in $(tr '+' '\n' <<< "$1" | tac); do patch -p1 -R -s < "$p"; done; }
applied=""  # the patches now applied ('+'-joined), reversed on exit: the working tree as it was
trap '[[ -z $applied ]] || reverse "$applied"' EXIT
# Each variant's patches in order, each checked (dry run) on top of the ones before it.
for v in "${variants[@]}"; do
  for p in ${v//+/ }; do
    [[ -f $p ]] || { echo "prefill-ab.sh: no patch file '$p'" >&2; exit 2; }
    patch -p1 --dry-run -s < "$p" > /dev/null ||
      { echo "prefill-ab.sh: '$p' does not apply to the working tree${applied:+ after $applied}" >&2; exit 2; }
    apply "$p"
    applied=${applied:+$applied+}$p
  done
  reverse "$applied"
  applied=""
done
[[ -f "$synth/config.json" || -f .synth/full.json ]] ||
  { echo "prefill-ab.sh: $synth has no checkpoint and .synth/full.json is missing (see docs/metal.md)" >&2; exit 2; }
mkdir -p "$out/bin"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/steps.log"; }

synth_pid=""
if [[ ! -f "$synth/config.json" ]]; then
  python3 scripts/synth_checkpoint.py .synth/full.json "$synth" --jobs 4 > "$out/synth.log" 2>&1 &
  synth_pid=$!
fi

build_dir=build/cuda-ab
cmake -S native -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DMOELENS_CUDA=ON -DMOELENS_GPU_CHECK=ON \
  -DMOELENS_METAL=OFF -DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-90}" > "$out/build.log" 2>&1
targets=(moelens-gpu-bench)
[[ $check_seeds == 0 ]] || targets+=(moelens-gpu-check)
build() { cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}" >> "$out/build.log" 2>&1; }
# keep NAME: the build's binaries under OUT/bin (NAME, and NAME-check with --check).
keep() {
  cp "$build_dir/moelens-gpu-bench" "$out/bin/$1"
  [[ $check_seeds == 0 ]] || cp "$build_dir/moelens-gpu-check" "$out/bin/$1-check"
}

names=(tree)
build || { stamp "the tree does not build (see $out/build.log)"; exit 1; }
keep tree
stamp "tree built"
for i in "${!variants[@]}"; do
  v=${variants[$i]} name="variant$((i + 1))"
  apply "$v"
  applied=$v
  if build; then keep "$name"; names+=("$name"); stamp "$name ($v) built"
  else stamp "$name ($v) does not build (see $out/build.log)"; fi
  reverse "$v"
  applied=""
done
if [[ -n $synth_pid ]]; then wait "$synth_pid" || { stamp "writing the checkpoint failed (see $out/synth.log)"; exit 1; }; fi

for r in $(seq 1 "$rounds"); do
  for name in "${names[@]}"; do
    "$out/bin/$name" prefill "$synth" --backend cuda --prompts "$prompts" --repeat 2 --compare-max 0 \
      > "$out/$name-round$r.txt" 2>&1 || stamp "$name, round $r failed (see $out/$name-round$r.txt)"
  done
  stamp "round $r done"
done

# Mean tok/s per prompt length and build, the ratio to the tree, and the routing each build gave.
python3 "$here/prefill-ab-tables.py" means "$out" "$rounds" "${names[@]}" | tee "$out/means.txt"
for i in "${!variants[@]}"; do echo "variant$((i + 1)): ${variants[$i]}"; done | tee -a "$out/means.txt"

if [[ $profile == 1 ]]; then
  for name in "${names[@]}"; do
    MOELENS_CUDA_PROFILE=1 "$out/bin/$name" prefill "$synth" --backend cuda --prompts "$prompts" --repeat 1 \
      --compare-max 0 > "$out/$name-profile.txt" 2>&1 || stamp "$name: profile failed"
  done
  stamp "profiles in $out/*-profile.txt"
  # Per prompt length, µs per launch of the main kernels by build, and each build's profiled total.
  python3 "$here/prefill-ab-tables.py" kernels "$out" "${names[@]}" | tee "$out/kernels.txt"
fi

if [[ $check_seeds != 0 ]]; then
  : > "$out/checks.txt"
  for name in "${names[@]}"; do
    for seed in $(seq 1 "$check_seeds"); do
      log="$out/$name-check-seed$seed.txt"
      "$out/bin/$name-check" --runtime cuda --seed "$seed" > "$log" 2>&1 || true
      echo "$name seed $seed: $(tail -1 "$log")" | tee -a "$out/checks.txt"
      grep '^FAIL' "$log" | tee -a "$out/checks.txt" || true
    done
  done
  stamp "kernel cases in $out/checks.txt"
fi
