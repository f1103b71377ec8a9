// One kernel launch as every GPU target sees it: buffers by binding index, the parameter struct, and
// the grid (threadgroups) and threadgroup size, as Metal's dispatchThreadgroups takes them. The
// emulator's and CUDA's generated launchers unpack it into the kernel's arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace moelens::gpu {

constexpr int kMaxBindings = 31;

struct KernelLaunch {
  void* buffers[kMaxBindings] = {};
  const void* params = nullptr;
  size_t params_size = 0;
  int params_index = -1;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t threads[3] = {1, 1, 1};

  // Checks the launch against what the kernel declares (generated launchers call this): every buffer
  // bound, the parameter struct at its index and of its size, the threadgroup within its maximum.
  void require(const char* kernel, uint32_t buffer_mask, int want_params_index, size_t want_params_size,
               int max_threads) const {
    if (uint64_t(threads[0]) * threads[1] * threads[2] > uint64_t(max_threads))
      throw std::runtime_error(std::string("kernel ") + kernel + ": threadgroup of " +
                               std::to_string(uint64_t(threads[0]) * threads[1] * threads[2]) +
                               " threads; the kernel declares at most " + std::to_string(max_threads));
    for (int i = 0; i < kMaxBindings; ++i)
      if ((buffer_mask >> i & 1u) && !buffers[i])
        throw std::runtime_error(std::string("kernel ") + kernel + ": buffer " + std::to_string(i) + " is not bound");
    if (want_params_index != params_index || want_params_size != params_size)
      throw std::runtime_error(std::string("kernel ") + kernel + ": parameters at index " + std::to_string(params_index) +
                               " of " + std::to_string(params_size) + " bytes; the kernel declares index " +
                               std::to_string(want_params_index) + " of " + std::to_string(want_params_size) + " bytes");
  }
};

}  // namespace moelens::gpu
