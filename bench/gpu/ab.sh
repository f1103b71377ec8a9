#!/usr/bin/env bash
# Times prefill and decode on the working tree and on variants of it (each a patch file, or several
# joined with '+'), in alternating rounds, on a machine without Node: builds the tree, then each variant
# in the same build folder (patch applied, build repeated, patch reversed), writes the synthetic
# checkpoint if it is not there yet, and runs `moelens-gpu-bench prefill` and `speed` on every build in
# turn, round after round, so that drifts of the GPU's clock fall on all of them alike. Prints each
# build's mean tok/s and its ratio to the tree, with the routing of its prompts and the digest and
# launches per token of its decode (marked where they differ from the tree's); with --profile, also a
# per-kernel profile of each build's prompts; with --check, each build's kernel cases on the GPU.
set -euo pipefail
here=$(dirname "$0")

usage() {
  cat <<'EOF'
Usage: bench/gpu/ab.sh [--out DIR] [--synth DIR] [--backend NAME] [--build-dir DIR] [--rounds N]
                       [--prompts N,N|none] [--decode N,N] [--decode-tokens N] [--precision P] [--profile]
                       [--check N] VARIANT...

  VARIANT          a patch file against the working tree (git diff output), or several joined by '+'
                   (applied in that order), e.g. fast-tiles.patch or a.patch+b.patch
  --out DIR        logs and results (default /tmp/ab)
  --synth DIR      the checkpoint; the synthetic one is written from .synth/full.json if DIR has none
                   (default /tmp/synth)
  --backend NAME   cuda (default), or emulator: the Metal kernels on the CPU, to try the tool on a
                   small checkpoint such as models/moelens-tiny
  --build-dir DIR  the CMake build folder, configured for the backend and reused (default build/ab-BACKEND;
                   build/cuda, the one bench/gpu/h200-bench.sh makes, saves a full build)
  --rounds N       rounds of every build (default 3)
  --prompts N,N    prompt lengths timed with `moelens-gpu-bench prefill` (default 512,4096), or none
  --decode N,N     also time decode after prompts of these lengths (`moelens-gpu-bench speed`, the
                   token kept on the device), e.g. 256,4096,32768 (default: no decode rounds)
  --decode-tokens N  tokens decoded per run (default 128)
  --precision P    the decode rounds' precision, fp16 (default) or fp32
  --profile        after the rounds, a per-kernel profile of every build's prompts (cuda:
                   MOELENS_CUDA_PROFILE=1) and a table of the main kernels' time per launch by build
                   (OUT/kernels.txt)
  --check N        after the rounds, every build's kernel cases (moelens-gpu-check --runtime BACKEND)
                   with seeds 1 to N, and a line per build and seed in OUT/checks.txt

Run from the repository root; the working tree is left as it was. Needs cmake, patch, nvcc (cuda) and
python3 with numpy (for the checkpoint).
EOF
}

out=/tmp/ab
synth=/tmp/synth
backend=cuda
build_dir=""
rounds=3
prompts=512,4096
decode=""
decode_tokens=128
precision=fp16
profile=0
check_seeds=0
variants=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --synth) synth="$2"; shift 2 ;;
    --backend) backend="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --decode) decode="$2"; shift 2 ;;
    --decode-tokens) decode_tokens="$2"; shift 2 ;;
    --precision) precision="$2"; shift 2 ;;
    --profile) profile=1; shift ;;
    --check) [[ $# -ge 2 ]] || { echo "ab.sh: --check takes a count of seeds" >&2; exit 2; }
      check_seeds="$2"; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    -*) echo "ab.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) variants+=("$1"); shift ;;
  esac
done
lengths='^[1-9][0-9]*(,[1-9][0-9]*)*$'
[[ ${#variants[@]} -gt 0 ]] || { echo "ab.sh: give at least one variant (see --help)" >&2; exit 2; }
[[ $backend == cuda || $backend == emulator ]] || { echo "ab.sh: --backend takes cuda or emulator, got '$backend'" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: --rounds takes a positive count, got '$rounds'" >&2; exit 2; }
[[ $prompts == none || $prompts =~ $lengths ]] || { echo "ab.sh: --prompts takes token counts like 512,4096 or none, got '$prompts'" >&2; exit 2; }
[[ -z $decode || $decode =~ $lengths ]] || { echo "ab.sh: --decode takes prompt lengths like 256,4096, got '$decode'" >&2; exit 2; }
[[ $decode_tokens =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: --decode-tokens takes a positive count, got '$decode_tokens'" >&2; exit 2; }
[[ $precision == fp16 || $precision == fp32 ]] || { echo "ab.sh: --precision takes fp16 or fp32, got '$precision'" >&2; exit 2; }
[[ $check_seeds =~ ^[0-9]+$ ]] || { echo "ab.sh: --check takes a count of seeds, got '$check_seeds'" >&2; exit 2; }
[[ $prompts != none || -n $decode ]] || { echo "ab.sh: nothing to time: --prompts none and no --decode" >&2; exit 2; }
[[ $profile == 0 || $backend == cuda ]] || { echo "ab.sh: --profile needs --backend cuda" >&2; exit 2; }
apply() { local p; for p in ${1//+/ }; do patch -p1 -s < "$p"; done; }
reverse() { local p; for p in $(tr '+' '\n' <<< "$1" | tac); do patch -p1 -R -s < "$p"; done; }
applied=""  # the patches now applied ('+'-joined), reversed on exit: the working tree as it was
trap '[[ -z $applied ]] || reverse "$applied"' EXIT
# Each variant's patches in order, each checked (dry run) on top of the ones before it.
for v in "${variants[@]}"; do
  for p in ${v//+/ }; do
    [[ -f $p ]] || { echo "ab.sh: no patch file '$p'" >&2; exit 2; }
    patch -p1 --dry-run -s < "$p" > /dev/null ||
      { echo "ab.sh: '$p' does not apply to the working tree${applied:+ after $applied}" >&2; exit 2; }
    apply "$p"
    applied=${applied:+$applied+}$p
  done
  reverse "$applied"
  applied=""
done
[[ -f "$synth/config.json" || -f .synth/full.json ]] ||
  { echo "ab.sh: $synth has no checkpoint and .synth/full.json is missing (see docs/metal.md)" >&2; exit 2; }
mkdir -p "$out/bin"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/steps.log"; }

synth_pid=""
if [[ ! -f "$synth/config.json" ]]; then
  python3 scripts/synth_checkpoint.py .synth/full.json "$synth" --jobs 4 > "$out/synth.log" 2>&1 &
  synth_pid=$!
fi

build_dir=${build_dir:-build/ab-$backend}
if [[ $backend == cuda ]]; then
  config=(-DMOELENS_CUDA=ON -DMOELENS_METAL=OFF -DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-90}")
else
  config=(-DMOELENS_CUDA=OFF -DMOELENS_METAL=ON)  # on Linux the mock Metal runtime over the emulator
fi
cmake -S native -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DMOELENS_GPU_CHECK=ON "${config[@]}" > "$out/build.log" 2>&1
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
    if [[ $prompts != none ]]; then
      "$out/bin/$name" prefill "$synth" --backend "$backend" --prompts "$prompts" --repeat 2 --compare-max 0 \
        > "$out/$name-round$r.txt" 2>&1 || stamp "$name, round $r failed (see $out/$name-round$r.txt)"
    fi
    for n in ${decode//,/ }; do
      log="$out/$name-decode$n-round$r.txt"
      "$out/bin/$name" speed "$synth" --backend "$backend" --precision "$precision" --prompt "$n" \
        --decode "$decode_tokens" > "$log" 2>&1 || stamp "$name, decode after $n, round $r failed (see $log)"
    done
  done
  stamp "round $r done"
done

# Mean tok/s per prompt length (and decode depth) and build, the ratio to the tree, the routing each
# build's prompts gave and the digest and launches per token of its decode.
{
  [[ $prompts == none ]] || python3 "$here/ab-tables.py" means "$out" "$rounds" "${names[@]}"
  [[ -z $decode ]] || python3 "$here/ab-tables.py" decode "$out" "$rounds" "$decode" "${names[@]}"
  for i in "${!variants[@]}"; do echo "variant$((i + 1)): ${variants[$i]}"; done
} | tee "$out/means.txt"

if [[ $profile == 1 && $prompts != none ]]; then
  for name in "${names[@]}"; do
    MOELENS_CUDA_PROFILE=1 "$out/bin/$name" prefill "$synth" --backend cuda --prompts "$prompts" --repeat 1 \
      --compare-max 0 > "$out/$name-profile.txt" 2>&1 || stamp "$name: profile failed"
  done
  stamp "profiles in $out/*-profile.txt"
  # Per prompt length, µs per launch of the main kernels by build, and each build's profiled total.
  python3 "$here/ab-tables.py" kernels "$out" "${names[@]}" | tee "$out/kernels.txt"
fi

if [[ $check_seeds != 0 ]]; then
  : > "$out/checks.txt"
  for name in "${names[@]}"; do
    for seed in $(seq 1 "$check_seeds"); do
      log="$out/$name-check-seed$seed.txt"
      "$out/bin/$name-check" --runtime "$backend" --seed "$seed" > "$log" 2>&1 || true
      echo "$name seed $seed: $(tail -1 "$log")" | tee -a "$out/checks.txt"
      grep '^FAIL' "$log" | tee -a "$out/checks.txt" || true
    done
  done
  stamp "kernel cases in $out/checks.txt"
fi
