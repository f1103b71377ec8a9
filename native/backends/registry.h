// The compute backends of this build, by name, in one place: "cpu" always (the reference); "metal" where
// gpu.cmake built the Metal host (on Linux x86-64 over the mock Objective-C runtime, which runs the CPU
// emulator of the kernels); "cuda" in a CUDA build; "emulator" (the GPU backend straight on the CPU
// emulator, for kernel tests) always. The binding, the SDK's backends() and the tools all ask here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../core/backend.h"

namespace moelens {

struct BackendOptions {
  int threads = 0;                 // cpu: worker threads (0: one per core)
  // cpu: fp32 (the default), int24, int16 or int8; gpu: fp32 (the default) or fp16; empty: the default
  std::string precision;
  int prefill_chunk = 0;  // tokens per forward chunk of a long prompt (0: the backend's default)
  // gpu at fp16: calls of at least this many tokens run on the tiled kernels (0: PREFILL_MIN_TOKENS)
  int prefill_min_tokens = 0;
  // emulator: thread order of the kernels (forward, reverse, random) and its seed
  std::string order = "forward";
  uint64_t seed = 1;
};

// The names make_backend() takes, the reference first: "cpu", then the GPU backends of this build.
std::vector<std::string> backend_names();
// Throws, naming the backends this build has, for an unknown name or an option the backend lacks.
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options = {});

}  // namespace moelens
