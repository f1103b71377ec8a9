#!/usr/bin/env bash
# The first run of the Metal backend on a Mac (Apple Silicon), and every run after a kernel change:
#   1. the machine; 2. every .metal file compiled offline at each MSL version the host uses (when the
#   offline Metal compiler is installed; the runtime compile is step 4 either way); 3. the tools;
#   4. every kernel against the CPU backend on the GPU (three seeds); 5. the same on the CPU emulator
#   (what Linux CI runs); 6. teacher-forced and greedy agreement on every fixture, with the tiled
#   prefill kernels (fp16) and with the exact ones (fp32); 7. the JavaScript end-to-end tests (npm
#   install builds the addon with the real Metal host); 8. with a checkpoint, the decode benchmark (as
#   the host encodes, and with every encoder call sent), the prefill benchmark and agreement on it; the
#   summary gives decode tok/s beside the host's calls and encoding time per token, and whether
#   indirect command buffers would pay (docs/metal.md). Prints one report and writes it to
#   build/first-mac-run/report.txt. Until this has run on a Mac, docs/metal.md calls the Metal backend
#   "built and emulated, not run".
#
# usage: scripts/first-mac-run.sh [CHECKPOINT_DIR]
#   CHECKPOINT_DIR  a Qwen3.6-35B-A3B 4-bit checkpoint (mlx-community or synthetic) for step 8
#   PEAK_GBPS       the Mac's memory bandwidth for the report (default 614, an M5 Max)
#   PEAK_TFLOPS     the Mac GPU's fp16 matrix rate for the prefill report, TFLOP/s (default 17, about an M4 Max)
#   FIRST_MAC_RUN_ANYWHERE=1  rehearse on Linux, where "metal" is the mock runtime over the emulator
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="$root/build/first-mac-run"
mkdir -p "$out"
report="$out/report.txt"
: >"$report"
model="${1:-}"
peak="${PEAK_GBPS:-614}"
peak_tflops="${PEAK_TFLOPS:-17}"
jobs=$(sysctl -n hw.ncpu 2>/dev/null || nproc)
msl_versions=(3.0)  # MTLLanguageVersion3_0 in native/backends/gpu/metal/metal_runtime.cpp

if [ "$(uname -s)" != "Darwin" ] && [ "${FIRST_MAC_RUN_ANYWHERE:-}" != "1" ]; then
  echo "first-mac-run: this is for macOS on Apple Silicon (FIRST_MAC_RUN_ANYWHERE=1 rehearses it elsewhere)" >&2
  exit 2
fi

results=()
say() { echo "$@" | tee -a "$report"; }
# step NAME COMMAND...: runs the command, keeps its output in the report, records PASS/FAIL.
step() {
  local name="$1"
  shift
  say ""
  say "== $name"
  say "\$ $*"
  if "$@" >"$out/step.log" 2>&1; then
    results+=("PASS  $name")
  else
    results+=("FAIL  $name (exit $?)")
  fi
  tee -a "$report" <"$out/step.log"
}

say "moelens first Mac run, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
if [ "$(uname -s)" = "Darwin" ]; then
  say "$(sw_vers -productName) $(sw_vers -productVersion) ($(sw_vers -buildVersion)), $(uname -m)"
  say "chip: $(sysctl -n machdep.cpu.brand_string), memory $(($(sysctl -n hw.memsize) / 1073741824)) GiB"
  say "$(system_profiler SPDisplaysDataType 2>/dev/null | grep -E 'Chipset Model|Total Number of Cores|Metal' | sed 's/^ *//')"
else
  say "rehearsal on $(uname -sm): the metal runtime is the mock Objective-C runtime over the CPU emulator"
fi
say "node $(node --version 2>/dev/null || echo 'missing'), $(cmake --version | head -1)"

# 2. Offline compile of each file at each MSL version (needs Xcode's Metal toolchain).
offline_compile() {
  local v f
  for v in "${msl_versions[@]}"; do
    for f in shaders/*.metal; do
      echo "metal -std=metal$v $f"
      xcrun -sdk macosx metal -std="metal$v" -I shaders -c "$f" -o "$out/$(basename "$f" .metal)-$v.air" || return 1
    done
  done
}
if xcrun -sdk macosx -f metal >/dev/null 2>&1; then
  step "offline compile of shaders/*.metal at MSL ${msl_versions[*]}" offline_compile
else
  say ""
  say "== offline compile skipped: no Metal compiler (xcrun metal); step 4 compiles every file at run time"
fi

# 3. Tools: kernel tests, benchmark, emulator self-test.
build_tools() {
  cmake -S native -B "$out/build" -DMOELENS_GPU_CHECK=ON -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$out/build" -j "$jobs" --target moelens-gpu-check moelens-gpu-bench moelens-emu-selftest
}
step "build the tools" build_tools
tools="$out/build"

# 4. Every kernel on the GPU against the CPU backend, on fresh random inputs.
for seed in 1 2 3; do
  step "kernels on the GPU against the CPU backend (seed $seed)" "$tools/moelens-gpu-check" --runtime metal --seed "$seed"
done

# 5. The same kernels on the CPU emulator, in three thread orders (what Linux CI checks).
step "emulator self-test" "$tools/moelens-emu-selftest"
step "kernels on the emulator, forward/reverse/random" "$tools/moelens-gpu-check"

# 6. Teacher-forced top-1 and greedy decoding against the CPU backend on every fixture.
fixtures=()
for d in test/fixtures/*/hf test/fixtures/*/mlx; do [ -f "$d/config.json" ] && fixtures+=("$d"); done
for precision in fp16 fp32; do
  step "agreement with the CPU backend on the fixtures ($precision: tiled prefill kernels, or the exact ones)" \
    "$tools/moelens-gpu-bench" agree "${fixtures[@]}" --backend metal --precision "$precision" --positions 128 --decode 32
done

# 7. The addon with the Metal host, end to end from JavaScript.
js_end_to_end() { npm install --no-audit --no-fund && npx vitest run test/metal.test.ts test/prefill-*.test.ts; }
step "JavaScript end to end (test/metal.test.ts, test/prefill-*.test.ts)" js_end_to_end

# 8. The checkpoint: benchmark and agreement. The decode benchmark runs twice: as the host encodes
# (only the state that changes) and with every call sent (MOELENS_METAL_ELIDE=0); the summary puts tok/s
# beside the host's calls and microseconds per token (docs/metal.md, "How the host encodes").
figures=()
# decode_figures LABEL: one summary line from the decode benchmark's log (the last step's).
decode_figures() {
  local speed host
  speed=$(sed -n 's/^decode, token kept on the device: [0-9]* tokens, \([0-9.]* tok\/s\) (\([0-9.]* ms per token\)).*/\1, \2/p' "$out/step.log")
  host=$(sed -n 's/^host per decoded token: //p' "$out/step.log")
  figures+=("$1: ${speed:-no tok/s (see the step above)}; host per token: ${host:-not reported}")
}
if [ -n "$model" ]; then
  step "decode benchmark on $model" "$tools/moelens-gpu-bench" speed "$model" --backend metal --prompt 256 --decode 64 --peak-gbps "$peak"
  decode_figures "decode"
  host_share=$(sed -n 's/^host per decoded token: .* = \([0-9.]*\) % of the .*/\1/p' "$out/step.log")
  step "decode benchmark on $model, every encoder call sent (MOELENS_METAL_ELIDE=0)" \
    env MOELENS_METAL_ELIDE=0 "$tools/moelens-gpu-bench" speed "$model" --backend metal --prompt 256 --decode 64 --peak-gbps "$peak"
  decode_figures "decode, every call sent"
  step "prefill benchmark on $model (fp16 tiled kernels against fp32, every prompt length)" "$tools/moelens-gpu-bench" prefill "$model" \
    --backend metal --prompts 1,2,4,8,16,32,64,128,512,4096 --repeat 2 --peak-tflops "$peak_tflops"
  step "agreement with the CPU backend on $model" "$tools/moelens-gpu-bench" agree "$model" --backend metal --positions 32 --decode 16
  # Indirect command buffers pay only where encoding a step approaches the GPU's time for it.
  if [ "$(uname -s)" != "Darwin" ]; then
    figures+=("indirect command buffers: no verdict off a Mac (the mock's commit runs the kernels on the CPU)")
  elif [ -z "$host_share" ]; then
    figures+=("indirect command buffers: no verdict (the decode benchmark reported no host time)")
  elif awk -v p="$host_share" 'BEGIN { exit !(p < 50) }'; then
    figures+=("indirect command buffers: not worth building: the host encodes and commits a step in $host_share % of its time, overlapped with the GPU's work")
  else
    figures+=("indirect command buffers: worth building: the host's encoding takes $host_share % of a step's time")
  fi
else
  say ""
  say "== benchmark skipped: pass a checkpoint directory to run it"
fi

say ""
say "== summary"
failed=0
for r in "${results[@]}"; do
  say "$r"
  [[ "$r" == FAIL* ]] && failed=1
done
for f in ${figures[@]+"${figures[@]}"}; do say "$f"; done
say ""
if [ "$failed" = 0 ] && [ "$(uname -s)" = "Darwin" ]; then
  say "All steps passed. docs/metal.md may now say: Metal backend run on this Mac (see the report above)."
fi
say "report: $report"
exit "$failed"
