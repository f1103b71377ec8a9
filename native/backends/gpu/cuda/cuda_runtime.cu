// The Runtime over CUDA: the kernels of shaders/*.metal translated by msl-translate, on one
// non-blocking stream.
//
// Graphs (the default): the dispatches recorded between two submissions (a session's forward call:
// a whole decode step) become one CUDA graph, a chain of kernel nodes built directly from the
// records (no stream capture). A later submission with the same kernels in the same order reuses
// that instantiated graph (a few are kept: decode steps and greedy steps differ):
// only the nodes whose arguments or grid changed (the attention position, the token's slot; buffers
// compared by device address) are updated in place, and the graph is launched as one unit, without
// waiting, so that the host records step n+1 while the GPU runs step n. Updates never affect a launch
// in flight.
//
// A prompt chunk's dispatches (Dispatch::prompt) are launched as they come, after the graph of whatever
// was recorded before them: the host makes each launch while the previous kernel runs, where a graph
// would first have the host update most of its nodes.
//
// Programmatic dependent launch (compute capability 9.0 and later): each kernel may be launched while
// the previous one still runs; its blocks wait at entry (msl_cuda::await_previous_kernel) until that
// kernel has finished, so the launch latency between two kernels is hidden. A decode step's kernels let
// the next one launch as soon as their blocks start; a prompt chunk's (Dispatch::prompt) only as their
// blocks exit (CudaKernelCall::early_dependents: earlier, the next kernel's blocks crowded onto the SMs
// that freed up first, and prompts ran 8-15 % slower). MOELENS_CUDA_PDL=0 turns it off.
//
// MOELENS_CUDA_GRAPH=0 launches each kernel directly instead; MOELENS_CUDA_PROFILE=1 does so too and
// times every kernel with events (stats() then lists GPU time per kernel; launches are plain there).
// Host copies and zero-fills go through a second stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../../../core/error.h"
#include "kernel_call.h"
#include "kernels.h"
#include "../launch.h"
#include "../runtime.h"

namespace moelens::gpu {

namespace kernels {
using CudaDescriber = void (*)(const KernelLaunch&, CudaKernelCall&);
extern const CudaDescriber kCudaDescribers[];
}  // namespace kernels

struct DeviceBuffer {
  unsigned char* ptr;
  size_t bytes;
};

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("cuda: ", what, ": ", cudaGetErrorString(e));
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

// The kernel launch a dispatch describes; `call` points into `launch`.
void describe(const Dispatch& d, KernelLaunch& launch, CudaKernelCall& call) {
  for (int i = 0; i < kMaxBindings; ++i)
    launch.buffers[i] = d.buffers[i].buffer ? d.buffers[i].buffer->ptr + d.buffers[i].offset : nullptr;
  launch.params = d.params_size ? d.params : nullptr;
  launch.params_size = d.params_size;
  launch.params_index = d.params_index;
  std::memcpy(launch.grid, d.grid, sizeof launch.grid);
  std::memcpy(launch.threads, d.threads, sizeof launch.threads);
  kernels::kCudaDescribers[d.kernel](launch, call);
  call.early_dependents = d.prompt ? 0u : 1u;
}

cudaKernelNodeParams node_params(const KernelLaunch& L, const CudaKernelCall& call) {
  cudaKernelNodeParams p{};
  p.func = const_cast<void*>(call.func);
  p.gridDim = dim3(L.grid[0], L.grid[1], L.grid[2]);
  p.blockDim = dim3(L.threads[0], L.threads[1], L.threads[2]);
  p.sharedMemBytes = 0;
  p.kernelParams = const_cast<void**>(call.args);
  return p;
}

// The device addresses of a dispatch's bindings when it was recorded. Graph nodes are compared by these,
// not by buffer handles: a buffer freed and another allocated may get the same handle at another address.
using Addresses = std::array<void*, kMaxBindings>;

Addresses addresses_of(const KernelLaunch& launch) {
  Addresses a;
  std::copy(std::begin(launch.buffers), std::end(launch.buffers), a.begin());
  return a;
}

bool same_arguments(const Dispatch& a, const Addresses& a_at, const Dispatch& b, const Addresses& b_at) {
  return a_at == b_at && a.params_size == b.params_size && std::memcmp(a.params, b.params, a.params_size) == 0 &&
         std::memcmp(a.grid, b.grid, sizeof a.grid) == 0 && std::memcmp(a.threads, b.threads, sizeof a.threads) == 0;
}

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime() {
    int devices = 0;
    check(cudaGetDeviceCount(&devices), "no CUDA device");
    if (devices == 0) fail("cuda: no CUDA device");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    check(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking), "stream");
    profile_ = env_is("MOELENS_CUDA_PROFILE", "1");
    use_graph_ = !profile_ && !env_is("MOELENS_CUDA_GRAPH", "0");
    int device = 0, major = 0;
    check(cudaGetDevice(&device), "device");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "device attribute");
    programmatic_ = major >= 9 && !env_is("MOELENS_CUDA_PDL", "0");
  }
  ~CudaRuntime() override {
    cudaStreamSynchronize(stream_);
    for (Graph& g : graphs_) destroy(g);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
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
    KernelLaunch launch;
    CudaKernelCall call;
    describe(d, launch, call);  // checks the bindings against the kernel now, in every mode
    ++launched_;
    if (use_graph_ && !d.prompt) {
      recorded_.push_back(d);
      recorded_at_.push_back(addresses_of(launch));
      return;
    }
    submit();  // what is recorded before this dispatch runs before it (a no-op without graphs)
    cudaEvent_t start = nullptr, end = nullptr;
    if (profile_) {
      start = event(2 * timed_.size()), end = event(2 * timed_.size() + 1);
      check(cudaEventRecord(start, stream_), "event");
    }
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(d.grid[0], d.grid[1], d.grid[2]);
    config.blockDim = dim3(d.threads[0], d.threads[1], d.threads[2]);
    config.stream = stream_;
    cudaLaunchAttribute programmatic{};
    programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    programmatic.val.programmaticStreamSerializationAllowed = 1;
    if (programmatic_ && !profile_ && !fenced_) config.attrs = &programmatic, config.numAttrs = 1;
    check(cudaLaunchKernelExC(&config, call.func, call.args), kernels::kInfo[d.kernel].name);
    fenced_ = d.fences_next;
    if (profile_) {
      check(cudaEventRecord(end, stream_), "event");
      timed_.push_back(d.kernel);
    }
  }

  void submit() override {
    if (!use_graph_ || recorded_.empty()) return;
    const auto t0 = Clock::now();
    Graph* g = nullptr;
    for (Graph& c : graphs_)
      if (same_kernels(recorded_, c.built)) g = &c;
    if (g && !update_nodes(*g)) {  // its nodes are now part old, part new: drop it
      check(cudaStreamSynchronize(stream_), "kernel execution");
      destroy(*g);
      graphs_.erase(graphs_.begin() + (g - graphs_.data()));
      g = nullptr;
    }
    if (!g) g = &build_graph();
    g->last_use = ++uses_;
    ++graph_launches_;
    check(cudaEventRecord(event(2 * graph_launches_pending_), stream_), "event");
    check(cudaGraphLaunch(g->exec, stream_), "graph launch");
    fenced_ = false;  // a launch after a graph waits for all of it
    check(cudaEventRecord(event(2 * graph_launches_pending_ + 1), stream_), "event");
    ++graph_launches_pending_;
    g->built.swap(recorded_);
    g->bound.swap(recorded_at_);
    recorded_.clear();
    recorded_at_.clear();
    host_submit_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void finish() override {
    submit();
    check(cudaStreamSynchronize(stream_), "kernel execution");
    float ms = 0;
    for (size_t i = 0; i < graph_launches_pending_; ++i) {
      check(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]), "event time");
      graph_gpu_ms_ += ms;
    }
    graph_launches_pending_ = 0;
    for (size_t i = 0; i < timed_.size(); ++i) {
      check(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]), "event time");
      kernel_ms_[size_t(timed_[i])] += ms;
      ++kernel_count_[size_t(timed_[i])];
    }
    timed_.clear();
  }

  void reset_stats() override {
    timed_.clear();  // launches not yet collected by finish() are not counted either
    graph_launches_pending_ = 0;
    launched_ = graph_launches_ = builds_ = node_updates_ = 0;
    host_submit_s_ = graph_gpu_ms_ = 0;
    std::fill(std::begin(kernel_ms_), std::end(kernel_ms_), 0.0);
    std::fill(std::begin(kernel_count_), std::end(kernel_count_), uint64_t(0));
  }

  std::string stats() const override {
    char line[256];
    std::string s = std::to_string(launched_) + " kernel launches";
    if (use_graph_) {
      const double n = double(std::max<uint64_t>(graph_launches_, 1));
      std::snprintf(line, sizeof line,
                    "; graphs: %llu launched, %llu built, %.1f nodes updated per launch, host %.1f us and GPU %.1f us "
                    "per launch",
                    static_cast<unsigned long long>(graph_launches_), static_cast<unsigned long long>(builds_),
                    double(node_updates_) / n, 1e6 * host_submit_s_ / n, 1e3 * graph_gpu_ms_ / n);
      s += line;
    } else {
      s += profile_ ? "; profiled (no graphs)" : "; graphs off";
    }
    if (!profile_) s += programmatic_ ? "; programmatic launches" : "; plain launches";
    if (profile_) {
      std::vector<int> order;
      for (int k = 0; k < kernels::kCount; ++k)
        if (kernel_count_[size_t(k)]) order.push_back(k);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return kernel_ms_[size_t(a)] > kernel_ms_[size_t(b)]; });
      for (int k : order) {
        std::snprintf(line, sizeof line, "\n  %-18s %8llu launches %10.2f ms GPU %8.2f us each", kernels::kInfo[k].name,
                      static_cast<unsigned long long>(kernel_count_[size_t(k)]), kernel_ms_[size_t(k)],
                      1e3 * kernel_ms_[size_t(k)] / double(kernel_count_[size_t(k)]));
        s += line;
      }
    }
    return s;
  }

 private:
  cudaEvent_t event(size_t i) {
    while (events_.size() <= i) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "event");
      events_.push_back(e);
    }
    return events_[i];
  }

  static bool same_kernels(const std::vector<Dispatch>& a, const std::vector<Dispatch>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].kernel != b[i].kernel || a[i].prompt != b[i].prompt || a[i].fences_next != b[i].fences_next) return false;
    return true;
  }

  // One instantiated graph: a chain of kernel nodes, and the dispatches its nodes now hold.
  struct Graph {
    std::vector<Dispatch> built;
    std::vector<Addresses> bound;  // built's device addresses
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaGraphNode_t> nodes;
    uint64_t last_use = 0;
  };
  static constexpr size_t kMaxGraphs = 4;

  // Brings g's nodes to the recorded arguments; false when CUDA refuses.
  bool update_nodes(Graph& g) {
    for (size_t i = 0; i < recorded_.size(); ++i) {
      if (same_arguments(recorded_[i], recorded_at_[i], g.built[i], g.bound[i])) continue;
      KernelLaunch launch;
      CudaKernelCall call;
      describe(recorded_[i], launch, call);
      const cudaKernelNodeParams p = node_params(launch, call);
      if (cudaGraphExecKernelNodeSetParams(g.exec, g.nodes[i], &p) != cudaSuccess) {
        cudaGetLastError();
        return false;
      }
      ++node_updates_;
    }
    return true;
  }

  // A graph of the recorded dispatches, in place of the least recently used one when the cache is full.
  Graph& build_graph() {
    check(cudaStreamSynchronize(stream_), "kernel execution");  // the graph replaced may still run
    if (graphs_.size() == kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                  [](const Graph& a, const Graph& b) { return a.last_use < b.last_use; });
      destroy(*lru);
      graphs_.erase(lru);
    }
    graphs_.emplace_back();
    Graph& g = graphs_.back();
    check(cudaGraphCreate(&g.graph, 0), "graph create");
    g.nodes.resize(recorded_.size());
    cudaGraphEdgeData plain{}, programmatic{};  // programmatic: node i may launch once every block of node
    programmatic.from_port = cudaGraphKernelNodePortProgrammatic;  // i-1 has passed await_previous_kernel
    programmatic.type = cudaGraphDependencyTypeProgrammatic;
    for (size_t i = 0; i < recorded_.size(); ++i) {
      KernelLaunch launch;
      CudaKernelCall call;
      describe(recorded_[i], launch, call);
      const cudaKernelNodeParams p = node_params(launch, call);
      check(cudaGraphAddKernelNode(&g.nodes[i], g.graph, nullptr, 0, &p), kernels::kInfo[recorded_[i].kernel].name);
      const bool overlap = programmatic_ && !recorded_[i].prompt && !(i && recorded_[i - 1].fences_next);
      const cudaGraphEdgeData& edge = overlap ? programmatic : plain;
      if (i) check(cudaGraphAddDependencies(g.graph, &g.nodes[i - 1], &g.nodes[i], &edge, 1), "graph edge");
    }
    check(cudaGraphInstantiate(&g.exec, g.graph, 0), "graph instantiate");
    ++builds_;
    return g;
  }

  static void destroy(Graph& g) {
    if (g.exec) cudaGraphExecDestroy(g.exec);
    if (g.graph) cudaGraphDestroy(g.graph);
    g.exec = nullptr;
    g.graph = nullptr;
  }

  cudaStream_t stream_ = nullptr, copies_ = nullptr;
  bool use_graph_ = true, profile_ = false;
  bool programmatic_ = false;  // kernels launched as programmatic dependents of the previous one
  bool fenced_ = false;        // the last direct launch's Dispatch::fences_next
  std::vector<Dispatch> recorded_;  // since the last submission
  std::vector<Addresses> recorded_at_;  // their device addresses
  std::vector<Graph> graphs_;
  std::vector<cudaEvent_t> events_;  // pairs: around each pending graph launch, or each profiled kernel
  std::vector<int> timed_;           // profiled kernels awaiting their times
  size_t graph_launches_pending_ = 0;
  uint64_t launched_ = 0, graph_launches_ = 0, builds_ = 0, node_updates_ = 0;
  uint64_t uses_ = 0;  // submissions ever, for least-recently-used eviction (not reset with the stats)
  double host_submit_s_ = 0, graph_gpu_ms_ = 0;
  double kernel_ms_[kernels::kCount] = {};
  uint64_t kernel_count_[kernels::kCount] = {};
};

}  // namespace

std::unique_ptr<Runtime> make_cuda_runtime() { return std::make_unique<CudaRuntime>(); }

}  // namespace moelens::gpu
