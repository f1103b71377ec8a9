// Settings of the MSL emulator (msl.h, emulator.cpp) for the code that runs kernels on it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace msl_emu {

// The order in which the fibers of a threadgroup (and the threadgroups of a grid) run between
// synchronisation points, and in which simdgroups waiting at collectives are released (one at a time,
// so that it runs ahead of the others up to its next barrier). A kernel that is missing a barrier
// computes a different result in one of them.
enum class Order { Forward, Reverse, Random };

const char* order_name(Order o);
bool parse_order(const std::string& name, Order* out);

// For the launches that follow on the calling thread. Random order draws from `seed`.
void set_order(Order order, uint64_t seed = 1);
Order current_order();

// A kernel that broke the rules of the portable subset (or deadlocked).
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The kernel running on this thread (for crash reports), or null.
const char* running_kernel();

}  // namespace msl_emu
