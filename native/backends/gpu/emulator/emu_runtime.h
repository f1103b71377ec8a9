// The Runtime over the CPU emulator of MSL: kernels from shaders/*.metal, translated to C++ by
// msl-translate, run as fibers on the calling thread when the recorded work is finished. For tests
// (every thread order; the check of await_inputs(), emulator.h's set_pre_wait_check) and for checking
// the host code of the GPU backend without a GPU.
#pragma once

#include <memory>
#include <vector>

#include "emulator.h"
#include "../runtime.h"

namespace moelens::gpu {

// Host memory for emulated device buffers, with an inaccessible page right after the end so that an
// out-of-bounds kernel read faults instead of reading a neighbour.
void* emu_map_buffer(size_t bytes);
void emu_unmap_buffer(void* p, size_t bytes);

// Runs a recorded dispatch on the emulator: `base[i]` is the host address of binding i's buffer.
void emu_run_dispatch(const Dispatch& d, void* const* base);

class EmuRuntime final : public Runtime {
 public:
  explicit EmuRuntime(msl_emu::Order order = msl_emu::Order::Forward, uint64_t seed = 1);
  ~EmuRuntime() override;
  const char* name() const override { return "emulator"; }

  DeviceBuffer* create(size_t bytes) override;
  void destroy(DeviceBuffer* b) override;
  void write(DeviceBuffer* b, size_t offset, const void* src, size_t bytes) override;
  void read(DeviceBuffer* b, size_t offset, void* dst, size_t bytes) override;
  void dispatch(const Dispatch& d) override;
  void submit() override { finish(); }  // the emulator runs work when it is submitted
  void finish() override;

 private:
  msl_emu::Order order_;
  uint64_t seed_;
  std::vector<Dispatch> queue_;
};

}  // namespace moelens::gpu
