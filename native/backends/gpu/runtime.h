// What a GPU API gives the GPU backend (gpu_backend.h): device buffers, kernel dispatches recorded in
// order, and a point where the recorded work is submitted and waited for. Implemented over Metal
// (metal/metal_runtime.cpp, through objc_msgSend; on Linux against the mock Objective-C runtime that runs the
// CPU emulator), over the emulator directly (emulator/emu_runtime.cpp), and over CUDA (cuda/cuda_runtime.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "launch.h"

namespace moelens::gpu {

struct DeviceBuffer;  // defined by each runtime

struct Binding {
  DeviceBuffer* buffer = nullptr;
  size_t offset = 0;  // bytes
};

constexpr size_t kMaxParamsBytes = 512;

struct Dispatch {
  int kernel = -1;  // kernels::Id
  Binding buffers[kMaxBindings];
  alignas(16) unsigned char params[kMaxParamsBytes];
  size_t params_size = 0;
  int params_index = -1;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t threads[3] = {1, 1, 1};
  // A prompt chunk's: kernels long enough that the next launch is made while they run. CUDA launches it
  // as it comes (after whatever was recorded before it) instead of recording it into a graph, whose
  // node updates would only add host time before the GPU starts, and plainly, where a decode step's
  // kernels may be launched while the previous one still runs (programmatic dependent launch), which
  // measured slower for prompts. Runtimes without graphs or such launches ignore it.
  bool prompt = false;
  // What it writes, the next launch may read before it waits for it: kernels read the model's weights
  // before their await_inputs(), and a host write staged behind recorded work (GpuBackend::write) is a
  // launch. CUDA then starts the next launch only once this one has finished; the emulator's check of
  // await_inputs() then counts nothing before it as in flight; Metal ignores it.
  bool fences_next = false;
};

// The host's side of recording and submitting work, counted like Runtime::stats(): what a report per
// decoded token divides. Zero where a runtime does not count it.
struct HostEncoding {
  uint64_t dispatches = 0;
  uint64_t submissions = 0;  // command buffers committed
  uint64_t calls = 0;        // API calls made to record and submit them (Metal: Objective-C messages)
  uint64_t elided = 0;       // calls not made because the encoder had that state already
  double encode_s = 0;       // host time recording dispatches
  double submit_s = 0;       // host time submitting them
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual const char* name() const = 0;

  // A zero-filled buffer of `bytes` (at least 16).
  virtual DeviceBuffer* create(size_t bytes) = 0;
  virtual void destroy(DeviceBuffer* b) = 0;
  // Host copies; only called while no recorded work is pending.
  virtual void write(DeviceBuffer* b, size_t offset, const void* src, size_t bytes) = 0;
  virtual void read(DeviceBuffer* b, size_t offset, void* dst, size_t bytes) = 0;

  // Records a kernel launch after the ones before it (each sees the effects of the previous ones).
  virtual void dispatch(const Dispatch& d) = 0;
  // Submits everything recorded since the last submit() or finish() without waiting for it.
  virtual void submit() = 0;
  // Submits what is left and waits for all submitted work.
  virtual void finish() = 0;

  // A line about what the runtime did (e.g. CUDA graph instantiations and updates), for reports,
  // counted from construction or the last reset_stats().
  virtual std::string stats() const { return ""; }
  virtual HostEncoding host_encoding() const { return {}; }
  virtual void reset_stats() {}
};

}  // namespace moelens::gpu
