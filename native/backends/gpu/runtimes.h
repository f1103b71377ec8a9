// The runtimes this build has, by name: "emulator" always; "metal" where the Metal host is built (on
// macOS the real one; on Linux x86-64 over the mock Objective-C runtime, which runs the emulator);
// "cuda" when built with MOELENS_CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime.h"

namespace moelens::gpu {

std::vector<std::string> runtime_names();  // e.g. {"emulator", "metal"}
std::string available_runtimes();          // the same as one string: "emulator, metal"
// `order` and `seed` choose the emulator's thread order (forward, reverse, random); the mock Metal
// runtime reads MOELENS_EMU_ORDER instead. Throws for a runtime this build does not have.
std::unique_ptr<Runtime> make_runtime(const std::string& name, const std::string& order = "forward", uint64_t seed = 1);

}  // namespace moelens::gpu
