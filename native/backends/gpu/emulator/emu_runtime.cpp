#include "emu_runtime.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "../../../core/error.h"
#include "kernels.h"

namespace moelens::gpu {

namespace kernels {
using EmuLauncher = void (*)(const KernelLaunch&);
extern const EmuLauncher kEmuLaunchers[];
}  // namespace kernels

struct DeviceBuffer {
  unsigned char* data;
  size_t bytes;
};

namespace {
size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }
// The buffer's bytes rounded up to 16, placed so that they end where the guard page begins.
size_t mapped_bytes(size_t bytes) { return round_up(round_up(bytes, 16), page_size()) + page_size(); }
}  // namespace

void* emu_map_buffer(size_t bytes) {
  const size_t total = mapped_bytes(bytes);
  void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) fail("emulator: cannot map a buffer of ", bytes, " bytes");
  unsigned char* guard = static_cast<unsigned char*>(m) + total - page_size();
  mprotect(guard, page_size(), PROT_NONE);
  return guard - round_up(bytes, 16);
}

void emu_unmap_buffer(void* p, size_t bytes) {
  unsigned char* guard = static_cast<unsigned char*>(p) + round_up(bytes, 16);
  munmap(guard + page_size() - mapped_bytes(bytes), mapped_bytes(bytes));
}

void emu_run_dispatch(const Dispatch& d, void* const* base) {
  KernelLaunch L;
  for (int i = 0; i < kMaxBindings; ++i)
    if (base[i]) L.buffers[i] = static_cast<unsigned char*>(base[i]) + d.buffers[i].offset;
  L.params = d.params_size ? d.params : nullptr;
  L.params_size = d.params_size;
  L.params_index = d.params_index;
  std::memcpy(L.grid, d.grid, sizeof L.grid);
  std::memcpy(L.threads, d.threads, sizeof L.threads);
  kernels::kEmuLaunchers[d.kernel](L);
}

EmuRuntime::EmuRuntime(msl_emu::Order order, uint64_t seed) : order_(order), seed_(seed) {}

EmuRuntime::~EmuRuntime() = default;

DeviceBuffer* EmuRuntime::create(size_t bytes) {
  auto* b = new DeviceBuffer{static_cast<unsigned char*>(emu_map_buffer(bytes)), bytes};
  return b;  // anonymous mappings are zero-filled
}

void EmuRuntime::destroy(DeviceBuffer* b) {
  emu_unmap_buffer(b->data, b->bytes);
  delete b;
}

void EmuRuntime::write(DeviceBuffer* b, size_t offset, const void* src, size_t bytes) {
  if (offset + bytes > b->bytes) fail("emulator: write of ", bytes, " bytes at ", offset, " into a buffer of ", b->bytes);
  std::memcpy(b->data + offset, src, bytes);
}

void EmuRuntime::read(DeviceBuffer* b, size_t offset, void* dst, size_t bytes) {
  if (offset + bytes > b->bytes) fail("emulator: read of ", bytes, " bytes at ", offset, " from a buffer of ", b->bytes);
  std::memcpy(dst, b->data + offset, bytes);
}

void EmuRuntime::dispatch(const Dispatch& d) { queue_.push_back(d); }

void EmuRuntime::finish() {
  msl_emu::set_order(order_, seed_);
  std::vector<Dispatch> work;
  work.swap(queue_);
  // The buffers written since the last point where every launch had finished (the start of this work,
  // or a launch that fences the next): with CUDA they may still be being written when a launch starts.
  std::vector<const DeviceBuffer*> in_flight;
  bool fenced = false;
  for (const Dispatch& d : work) {
    if (fenced) in_flight.clear();
    const kernels::Info& info = kernels::kInfo[d.kernel];
    void* base[kMaxBindings] = {};
    std::vector<msl_emu::Span> early;  // what it binds of those, from each binding's offset on
    for (int i = 0; i < kMaxBindings; ++i)
      if (DeviceBuffer* b = d.buffers[i].buffer) {
        if (d.buffers[i].offset > b->bytes)
          fail("emulator: kernel ", info.name, ": binding ", i, " at offset ", d.buffers[i].offset,
               " past the end of its buffer");
        base[i] = b->data;
        if (info.awaits && std::find(in_flight.begin(), in_flight.end(), b) != in_flight.end())
          early.push_back({b->data + d.buffers[i].offset, b->bytes - d.buffers[i].offset});
      }
    msl_emu::set_pre_wait_check(std::move(early));
    emu_run_dispatch(d, base);
    for (uint32_t m = info.written_mask; m != 0; m &= m - 1) {
      const DeviceBuffer* b = d.buffers[__builtin_ctz(m)].buffer;
      if (b && std::find(in_flight.begin(), in_flight.end(), b) == in_flight.end()) in_flight.push_back(b);
    }
    fenced = d.fences_next;
    ++seed_;  // a fresh random order per launch
  }
}

}  // namespace moelens::gpu
