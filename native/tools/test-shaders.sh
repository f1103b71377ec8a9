#!/usr/bin/env bash
# npm run test:shaders: builds the kernel tests (and moelens-gpu-bench, which test/shaders.test.ts runs
# on the emulator) into build/shaders and runs them on the CPU emulator of MSL: the emulator's
# self-test, then every kernel of shaders/*.metal against the CPU backend in the forward, reverse and
# random thread orders (one line per kernel). Extra arguments go to moelens-gpu-check (see its --help).
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs="${MOELENS_BUILD_JOBS:-2}"
cmake -S native -B build/shaders -DMOELENS_GPU_CHECK=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/shaders --target moelens-gpu-check moelens-gpu-bench moelens-emu-selftest msl-translate -j "$jobs" >/dev/null
build/shaders/moelens-emu-selftest
build/shaders/moelens-gpu-check "$@"
