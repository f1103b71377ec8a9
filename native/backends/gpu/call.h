// What the GPU backend's op files share: GpuBackend::Call (one kernel launch being described) and the
// launch-size helpers. Private to native/backends/gpu.
#pragma once

#include <algorithm>
#include <cstring>

#include "../../core/error.h"
#include "gpu_backend.h"

namespace moelens::gpu {

namespace k = kernels;

inline uint32_t u32(size_t v, const char* what) {
  if (v > 0xffffffffu) fail("gpu backend: ", what, " of ", v, " does not fit the kernels' 32-bit counts");
  return uint32_t(v);
}

inline uint32_t ceil_div(size_t a, size_t b) { return u32((a + b - 1) / b, "grid size"); }

// Threads for a norm over rows of `dim`: enough for NORM_MAX_PER_THREAD values each.
inline uint32_t norm_threads(int dim) {
  if (dim <= 0 || size_t(dim) > size_t(NORM_THREADS) * NORM_MAX_PER_THREAD)
    fail("gpu backend: RMSNorm over rows of ", dim, " (the kernel takes up to ", size_t(NORM_THREADS) * NORM_MAX_PER_THREAD, ")");
  return std::max<uint32_t>(32, (ceil_div(size_t(dim), NORM_MAX_PER_THREAD) + 31) / 32 * 32);
}

static_assert(GEMV_THREADS == 32 * GEMV_SIMDGROUPS, "GEMV_THREADS must be GEMV_SIMDGROUPS simdgroups");
static_assert(GEMV_SIMDGROUPS >= 2 && (GEMV_SIMDGROUPS & (GEMV_SIMDGROUPS - 1)) == 0,
              "GEMV_SIMDGROUPS must be a power of two: split-K halves it, moe_gate_up pairs simdgroups");

// Simdgroups per block of rows (split-K) of a GEMV-class launch of `blocks` blocks for `tokens`
// tokens: doubled while the launch has fewer than GEMV_TARGET_THREADGROUPS threadgroups and each part
// still loads `unroll` words per lane of a row of `row_words` words.
inline uint32_t split_k(size_t blocks, size_t tokens, size_t row_words, size_t unroll) {
  uint32_t split = 1;
  while (split < GEMV_SIMDGROUPS && size_t(split) * 2 * 32 * unroll <= row_words &&
         size_t(ceil_div(blocks, GEMV_SIMDGROUPS / split)) * tokens < GEMV_TARGET_THREADGROUPS)
    split *= 2;
  return split;
}



// One kernel launch being described: bindings by the kernel's parameter indices (kernels.h).
class GpuBackend::Call {
 public:
  Call(GpuBackend& be, k::Id id) : be_(be) { d_.kernel = int(id); }
  Call& buf(int index, View v) {
    if (!v) fail("gpu backend: kernel ", k::kInfo[d_.kernel].name, ": buffer ", index, " is missing");
    d_.buffers[index] = {static_cast<GpuBuffer*>(v.buf)->device(), v.offset * elem_bytes(v.buf->type())};
    return *this;
  }
  Call& buf(int index, const GpuBuffer* b) {
    d_.buffers[index] = {(b ? b : be_.dummy_.get())->device(), 0};
    return *this;
  }
  // An optional buffer: the dummy when absent (the kernel is told by a flag not to touch it).
  Call& opt(int index, View v) { return v ? buf(index, v) : buf(index, nullptr); }
  template <class P>
  Call& params(int index, const P& p) {
    static_assert(sizeof(P) <= kMaxParamsBytes, "parameter struct too large");
    std::memcpy(d_.params, &p, sizeof(P));
    d_.params_size = sizeof(P);
    d_.params_index = index;
    return *this;
  }
  Call& grid(uint32_t x, uint32_t y = 1, uint32_t z = 1) {
    d_.grid[0] = x, d_.grid[1] = y, d_.grid[2] = z;
    return *this;
  }
  Call& threads(uint32_t x) {
    d_.threads[0] = x;
    return *this;
  }
  Call& fence_next() {  // Dispatch::fences_next
    d_.fences_next = true;
    return *this;
  }
  void run() {
    d_.prompt = be_.prompt_;
    if (d_.grid[0] && d_.grid[1] && d_.grid[2]) be_.submit(d_);
  }

 private:
  GpuBackend& be_;
  Dispatch d_;
};

}  // namespace moelens::gpu
