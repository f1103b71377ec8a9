// Settings of the MSL emulator (msl.h, emulator.cpp) for the code that runs kernels on it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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

// The check of await_inputs() (shaders/common.h): with CUDA a kernel that calls it starts while earlier
// launches still run, so before it it may read only what no launch in flight writes (the model's
// weights). For the next run() on this thread, `in_flight` (the buffers launches wrote since the last
// point where all had finished) holds poison (bytes 0xff: NaN floats, indices past any table) while the
// launch's first threadgroup runs up to await_inputs(), and its contents are back before any of those
// threads goes past it. A kernel that reads one of them early computes from the poison, a wrong result
// that the tests comparing it with the CPU backend see; one that writes one early loses the write.
// Empty (the default): no check.
struct Span {
  unsigned char* data;
  size_t bytes;
};
void set_pre_wait_check(std::vector<Span> in_flight);

}  // namespace msl_emu
