// The Runtime over CUDA: the kernels of shaders/*.metal translated by msl-translate, launched on one
// non-blocking stream. Everything dispatched between two finish() calls (one forward call of the
// session: a whole decode step) is captured into a CUDA graph; when the next step has the same
// shape of work (same kernels in the same order; parameters, pointers and grid sizes may change),
// the instantiated graph is updated in place (cudaGraphExecUpdate) instead of instantiated again,
// and launched as one unit. MOELENS_CUDA_GRAPH=0 launches kernels directly instead.
// Host copies and zero-fills go through a second stream, so they never enter a capture.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "../../core/error.h"
#include "kernels.h"
#include "launch.h"
#include "runtime.h"

namespace moelens::gpu {

namespace kernels {
using CudaLauncher = void (*)(const KernelLaunch&, cudaStream_t);
extern const CudaLauncher kCudaLaunchers[];
}  // namespace kernels

struct DeviceBuffer {
  unsigned char* ptr;
  size_t bytes;
};

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("cuda: ", what, ": ", cudaGetErrorString(e));
}

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime() {
    int devices = 0;
    check(cudaGetDeviceCount(&devices), "no CUDA device");
    if (devices == 0) fail("cuda: no CUDA device");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    check(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking), "stream");
    const char* g = std::getenv("MOELENS_CUDA_GRAPH");
    use_graph_ = !(g && std::strcmp(g, "0") == 0);
  }
  ~CudaRuntime() override {
    if (exec_) cudaGraphExecDestroy(exec_);
    cudaStreamDestroy(copies_);
    cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "cuda"; }

  DeviceBuffer* create(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    check(cudaMemsetAsync(p, 0, bytes, copies_), "zero-fill");
    check(cudaStreamSynchronize(copies_), "zero-fill");
    return new DeviceBuffer{static_cast<unsigned char*>(p), bytes};
  }
  void destroy(DeviceBuffer* b) override {
    cudaFree(b->ptr);
    delete b;
  }
  void write(DeviceBuffer* b, size_t offset, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(b->ptr + offset, src, bytes, cudaMemcpyHostToDevice, copies_), "upload");
    check(cudaStreamSynchronize(copies_), "upload");
  }
  void read(DeviceBuffer* b, size_t offset, void* dst, size_t bytes) override {
    check(cudaMemcpyAsync(dst, b->ptr + offset, bytes, cudaMemcpyDeviceToHost, copies_), "download");
    check(cudaStreamSynchronize(copies_), "download");
  }

  void dispatch(const Dispatch& d) override {
    if (use_graph_ && !capturing_) {
      check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "begin capture");
      capturing_ = true;
    }
    KernelLaunch L;
    for (int i = 0; i < kMaxBindings; ++i)
      if (d.buffers[i].buffer) L.buffers[i] = d.buffers[i].buffer->ptr + d.buffers[i].offset;
    L.params = d.params_size ? d.params : nullptr;
    L.params_size = d.params_size;
    L.params_index = d.params_index;
    std::memcpy(L.grid, d.grid, sizeof L.grid);
    std::memcpy(L.threads, d.threads, sizeof L.threads);
    kernels::kCudaLaunchers[d.kernel](L, stream_);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) fail("cuda: launching kernel ", kernels::kInfo[d.kernel].name, ": ", cudaGetErrorString(e));
    ++launched_;
  }

  void finish() override {
    if (capturing_) {
      capturing_ = false;
      cudaGraph_t graph = nullptr;
      check(cudaStreamEndCapture(stream_, &graph), "end capture");
      cudaGraphExecUpdateResultInfo info;
      if (exec_ && cudaGraphExecUpdate(exec_, graph, &info) == cudaSuccess) {
        ++updates_;
      } else {
        cudaGetLastError();  // a failed update is not an error: instantiate anew
        if (exec_) cudaGraphExecDestroy(exec_);
        exec_ = nullptr;
        check(cudaGraphInstantiate(&exec_, graph, 0), "graph instantiate");
        ++instantiations_;
      }
      cudaGraphDestroy(graph);
      check(cudaGraphLaunch(exec_, stream_), "graph launch");
    }
    check(cudaStreamSynchronize(stream_), "kernel execution");
  }

  std::string stats() const override {
    return std::to_string(launched_) + " kernel launches" +
           (use_graph_ ? ", " + std::to_string(instantiations_) + " graph instantiations, " + std::to_string(updates_) +
                             " graph updates"
                       : ", graphs off");
  }

 private:
  cudaStream_t stream_ = nullptr, copies_ = nullptr;
  bool use_graph_ = true, capturing_ = false;
  cudaGraphExec_t exec_ = nullptr;
  uint64_t launched_ = 0, instantiations_ = 0, updates_ = 0;
};

}  // namespace

std::unique_ptr<Runtime> make_cuda_runtime() { return std::make_unique<CudaRuntime>(); }

}  // namespace moelens::gpu
