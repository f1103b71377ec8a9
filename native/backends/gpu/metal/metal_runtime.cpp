// The Runtime over Metal, through objc.h. Kernels are compiled at run time from the MSL text embedded
// at build time (newLibraryWithSource, one library per .metal file, MSL 3.0, fast math off so that
// infinities and NaNs keep their meaning); pipelines are cached per kernel. Everything dispatched
// between two submissions goes into one command buffer with one serial compute encoder (each
// dispatch sees the previous ones' writes): a decode step is one command buffer, committed without
// waiting so that the host records the next step meanwhile; finish() waits for them all. Within the
// encoder only the state that changes is sent (encoder_bindings.h; MOELENS_METAL_ELIDE=0 sends all of
// it, for comparison). Buffers are shared-storage: host reads and writes are memcpy, done only while
// no command buffer is in flight. MOELENS_METAL_STATS=1 prints stats() to stderr when the runtime closes.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../../../core/error.h"
#include "encoder_bindings.h"
#include "kernels.h"
#include "objc.h"
#include "../runtime.h"

namespace moelens::gpu {

using namespace objc;

namespace kernels {
extern const char* const kSources[];
}

struct DeviceBuffer {
  id buffer;
  unsigned char* contents;
  size_t bytes;
};

namespace {

constexpr NSUInteger kStorageModeShared = 0;
constexpr NSUInteger kLanguageVersion3_0 = (3 << 16) + 0;
constexpr NSInteger kCommandBufferStatusError = 5;

// Selectors, registered once.
struct Selectors {
  SEL alloc = sel_registerName("alloc"), init = sel_registerName("init"), retain = sel_registerName("retain"),
      release = sel_registerName("release");
  SEL stringWithUTF8String = sel_registerName("stringWithUTF8String:"), UTF8String = sel_registerName("UTF8String");
  SEL localizedDescription = sel_registerName("localizedDescription"), name = sel_registerName("name");
  SEL newCommandQueue = sel_registerName("newCommandQueue");
  SEL newBufferWithLength = sel_registerName("newBufferWithLength:options:");
  SEL newLibraryWithSource = sel_registerName("newLibraryWithSource:options:error:");
  SEL newFunctionWithName = sel_registerName("newFunctionWithName:");
  SEL newComputePipelineState = sel_registerName("newComputePipelineStateWithFunction:error:");
  SEL setLanguageVersion = sel_registerName("setLanguageVersion:");
  SEL setFastMathEnabled = sel_registerName("setFastMathEnabled:");
  SEL maxTotalThreadsPerThreadgroup = sel_registerName("maxTotalThreadsPerThreadgroup");
  SEL contents = sel_registerName("contents");
  SEL commandBuffer = sel_registerName("commandBuffer");
  SEL computeCommandEncoder = sel_registerName("computeCommandEncoder");
  SEL setComputePipelineState = sel_registerName("setComputePipelineState:");
  SEL setBuffer = sel_registerName("setBuffer:offset:atIndex:");
  SEL setBufferOffset = sel_registerName("setBufferOffset:atIndex:");
  SEL setBuffers = sel_registerName("setBuffers:offsets:withRange:");
  SEL setBytes = sel_registerName("setBytes:length:atIndex:");
  SEL dispatchThreadgroups = sel_registerName("dispatchThreadgroups:threadsPerThreadgroup:");
  SEL endEncoding = sel_registerName("endEncoding");
  SEL commit = sel_registerName("commit");
  SEL waitUntilCompleted = sel_registerName("waitUntilCompleted");
  SEL status = sel_registerName("status");
  SEL error = sel_registerName("error");
};

const Selectors& S() {
  static const Selectors s;
  return s;
}

std::string describe(id error) {
  if (!error) return "unknown error";
  id text = msg(error, S().localizedDescription);
  const char* s = text ? msg<const char*>(text, S().UTF8String) : nullptr;
  return s ? s : "unknown error";
}

id ns_string(const char* s) { return msg(cls("NSString"), S().stringWithUTF8String, s); }

// An on/off environment switch; unset or empty: `otherwise`.
bool switch_from_environment(const char* name, bool otherwise) {
  const char* v = std::getenv(name);
  if (!v || !*v) return otherwise;
  if (!std::strcmp(v, "1")) return true;
  if (!std::strcmp(v, "0")) return false;
  fail("metal: ", name, "=", v, " is not a switch (1 or 0)");
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class MetalRuntime final : public Runtime {
 public:
  MetalRuntime()
      : elide_(switch_from_environment("MOELENS_METAL_ELIDE", true)),
        print_stats_(switch_from_environment("MOELENS_METAL_STATS", false)) {
    device_ = MTLCreateSystemDefaultDevice();
    if (!device_) fail("metal: no Metal device (MTLCreateSystemDefaultDevice returned nil)");
    queue_ = msg(device_, S().newCommandQueue);
    if (!queue_) fail("metal: cannot create a command queue");
    libraries_.assign(kernels::kSourceCount, nullptr);
    pipelines_.assign(kernels::kCount, nullptr);
    max_threads_.assign(kernels::kCount, 0);
  }
  ~MetalRuntime() override {
    if (encoder_ || !in_flight_.empty()) {
      try {
        finish();
      } catch (const std::exception&) {
        // nobody waits for this work's result any more
      }
    }
    for (id p : pipelines_)
      if (p) msg<void>(p, S().release);
    for (id l : libraries_)
      if (l) msg<void>(l, S().release);
    msg<void>(queue_, S().release);
    msg<void>(device_, S().release);
    if (print_stats_) std::fprintf(stderr, "moelens metal: %s\n", stats().c_str());
  }
  const char* name() const override { return "metal"; }

  DeviceBuffer* create(size_t bytes) override {
    id b = msg(device_, S().newBufferWithLength, NSUInteger(bytes), kStorageModeShared);
    if (!b) fail("metal: cannot allocate a buffer of ", bytes, " bytes");
    auto* d = new DeviceBuffer{b, static_cast<unsigned char*>(msg<void*>(b, S().contents)), bytes};
    std::memset(d->contents, 0, bytes);
    return d;
  }
  void destroy(DeviceBuffer* b) override {
    bindings_.forget(b->buffer);
    msg<void>(b->buffer, S().release);
    delete b;
  }
  void write(DeviceBuffer* b, size_t offset, const void* src, size_t bytes) override {
    std::memcpy(b->contents + offset, src, bytes);
  }
  void read(DeviceBuffer* b, size_t offset, void* dst, size_t bytes) override {
    std::memcpy(dst, b->contents + offset, bytes);
  }

  void dispatch(const Dispatch& d) override {
    id pipeline = pipeline_for(d.kernel);
    const size_t threads = size_t(d.threads[0]) * d.threads[1] * d.threads[2];
    if (threads > max_threads_[size_t(d.kernel)])
      fail("metal: kernel ", kernels::kInfo[d.kernel].name, " runs ", threads, " threads per threadgroup; its pipeline allows ",
           max_threads_[size_t(d.kernel)]);
    const Clock::time_point t0 = Clock::now();
    if (!encoder_) {
      AutoreleasePool pool;
      command_buffer_ = msg(msg(queue_, S().commandBuffer), S().retain);
      encoder_ = msg(msg(command_buffer_, S().computeCommandEncoder), S().retain);
      bindings_.reset();
      host_.calls += 4;  // commandBuffer, retain, computeCommandEncoder, retain
    }
    if (elide_) send_changes(d, pipeline);
    else send_all(d, pipeline);
    msg<void>(encoder_, S().dispatchThreadgroups, MTLSize{d.grid[0], d.grid[1], d.grid[2]},
              MTLSize{d.threads[0], d.threads[1], d.threads[2]});
    ++host_.calls;
    ++host_.dispatches;
    host_.encode_s += seconds_since(t0);
  }

  void submit() override {
    if (!encoder_) return;
    const Clock::time_point t0 = Clock::now();
    msg<void>(encoder_, S().endEncoding);
    msg<void>(command_buffer_, S().commit);
    msg<void>(encoder_, S().release);
    in_flight_.push_back(command_buffer_);  // retained until finish() has waited for it
    encoder_ = command_buffer_ = nullptr;
    host_.calls += 3;  // endEncoding, commit, release
    ++host_.submissions;
    host_.submit_s += seconds_since(t0);
  }

  void finish() override {
    submit();
    std::string why;
    for (id cb : in_flight_) {  // one queue runs them in order; each is checked for its own error
      msg<void>(cb, S().waitUntilCompleted);
      if (why.empty() && msg<NSInteger>(cb, S().status) == kCommandBufferStatusError) {
        AutoreleasePool pool;
        why = describe(msg(cb, S().error));
      }
      msg<void>(cb, S().release);
    }
    in_flight_.clear();
    if (!why.empty()) fail("metal: command buffer failed: ", why);
  }

  HostEncoding host_encoding() const override { return host_; }
  void reset_stats() override {
    host_ = {};
    offset_calls_ = range_calls_ = range_bindings_ = 0;
  }
  std::string stats() const override {
    const double n = double(host_.submissions ? host_.submissions : 1);
    char line[640];
    std::snprintf(line, sizeof line,
                  "%llu dispatches in %llu command buffers; %llu Objective-C messages to encode and commit them "
                  "(%llu setBuffers:offsets:withRange: carrying %llu bindings, %llu setBufferOffset:atIndex:), %llu "
                  "calls elided%s; host %.1f us encoding, %.1f us committing; per command buffer: %.1f dispatches, "
                  "%.1f messages, %.1f us encoding, %.1f us committing",
                  static_cast<unsigned long long>(host_.dispatches), static_cast<unsigned long long>(host_.submissions),
                  static_cast<unsigned long long>(host_.calls), static_cast<unsigned long long>(range_calls_),
                  static_cast<unsigned long long>(range_bindings_), static_cast<unsigned long long>(offset_calls_),
                  static_cast<unsigned long long>(host_.elided), elide_ ? "" : " (MOELENS_METAL_ELIDE=0)",
                  1e6 * host_.encode_s, 1e6 * host_.submit_s, double(host_.dispatches) / n, double(host_.calls) / n,
                  1e6 * host_.encode_s / n, 1e6 * host_.submit_s / n);
    return line;
  }

 private:
  // The dispatch's state as it is: the pipeline, each bound buffer with its own call, the parameters.
  void send_all(const Dispatch& d, id pipeline) {
    msg<void>(encoder_, S().setComputePipelineState, pipeline);
    ++host_.calls;
    for (int i = 0; i < kMaxBindings; ++i)
      if (d.buffers[i].buffer) {
        msg<void>(encoder_, S().setBuffer, d.buffers[i].buffer->buffer, NSUInteger(d.buffers[i].offset), NSUInteger(i));
        ++host_.calls;
      }
    if (d.params_size) {
      msg<void>(encoder_, S().setBytes, static_cast<const void*>(d.params), NSUInteger(d.params_size),
                NSUInteger(d.params_index));
      ++host_.calls;
    }
  }

  // Only what differs from the encoder's state: a buffer that changes goes in setBuffer:offset:atIndex:
  // or, with those at the indices right after it, in one setBuffers:offsets:withRange:; a buffer bound
  // already at another offset takes setBufferOffset:atIndex:, which Metal makes cheaper.
  void send_changes(const Dispatch& d, id pipeline) {
    if (bindings_.pipeline(pipeline)) {
      msg<void>(encoder_, S().setComputePipelineState, pipeline);
      ++host_.calls;
    } else {
      ++host_.elided;
    }
    using Call = EncoderBindings::BufferCall;
    Call calls[kMaxBindings];
    for (int i = 0; i < kMaxBindings; ++i) {
      const Binding& b = d.buffers[i];
      calls[i] = b.buffer ? bindings_.buffer(i, b.buffer->buffer, b.offset) : Call::None;
      if (b.buffer && calls[i] == Call::None) ++host_.elided;
    }
    for (int i = 0; i < kMaxBindings;) {
      if (calls[i] == Call::Offset) {
        msg<void>(encoder_, S().setBufferOffset, NSUInteger(d.buffers[i].offset), NSUInteger(i));
        ++offset_calls_;
        ++host_.calls;
      }
      if (calls[i] != Call::Full) {
        ++i;
        continue;
      }
      int n = 1;
      while (i + n < kMaxBindings && calls[i + n] == Call::Full) ++n;
      if (n == 1) {
        msg<void>(encoder_, S().setBuffer, d.buffers[i].buffer->buffer, NSUInteger(d.buffers[i].offset), NSUInteger(i));
      } else {
        id buffers[kMaxBindings];
        NSUInteger offsets[kMaxBindings];
        for (int j = 0; j < n; ++j) {
          buffers[j] = d.buffers[i + j].buffer->buffer;
          offsets[j] = NSUInteger(d.buffers[i + j].offset);
        }
        msg<void>(encoder_, S().setBuffers, static_cast<const id*>(buffers), static_cast<const NSUInteger*>(offsets),
                  NSRange{NSUInteger(i), NSUInteger(n)});
        ++range_calls_;
        range_bindings_ += uint64_t(n);
      }
      ++host_.calls;
      i += n;
    }
    if (d.params_size) {
      if (bindings_.bytes(d.params_index, d.params, d.params_size)) {
        msg<void>(encoder_, S().setBytes, static_cast<const void*>(d.params), NSUInteger(d.params_size),
                  NSUInteger(d.params_index));
        ++host_.calls;
      } else {
        ++host_.elided;
      }
    }
  }

  id pipeline_for(int kernel) {
    if (pipelines_[size_t(kernel)]) return pipelines_[size_t(kernel)];
    AutoreleasePool pool;
    const kernels::Info& info = kernels::kInfo[kernel];
    id& library = libraries_[size_t(info.file)];
    if (!library) {
      id options = msg(msg(cls("MTLCompileOptions"), S().alloc), S().init);
      msg<void>(options, S().setLanguageVersion, kLanguageVersion3_0);
      msg<void>(options, S().setFastMathEnabled, false);
      id error = nullptr;
      library = msg(device_, S().newLibraryWithSource, ns_string(kernels::kSources[info.file]), options, &error);
      msg<void>(options, S().release);
      if (!library) fail("metal: compiling shaders/", kernels::kSourceNames[info.file], " failed: ", describe(error));
    }
    id function = msg(library, S().newFunctionWithName, ns_string(info.name));
    if (!function) fail("metal: shaders/", kernels::kSourceNames[info.file], " has no kernel ", info.name);
    id error = nullptr;
    id pipeline = msg(device_, S().newComputePipelineState, function, &error);
    msg<void>(function, S().release);
    if (!pipeline) fail("metal: pipeline for kernel ", info.name, " failed: ", describe(error));
    max_threads_[size_t(kernel)] = msg<NSUInteger>(pipeline, S().maxTotalThreadsPerThreadgroup);
    return pipelines_[size_t(kernel)] = pipeline;
  }

  id device_ = nullptr, queue_ = nullptr, command_buffer_ = nullptr, encoder_ = nullptr;
  const bool elide_;          // send only what differs from the encoder's state (MOELENS_METAL_ELIDE)
  const bool print_stats_;    // MOELENS_METAL_STATS
  EncoderBindings bindings_;  // what encoder_ has bound
  // Since construction or reset_stats(); of host_.calls, the setBufferOffset:atIndex: ones and the
  // setBuffers:offsets:withRange: ones with the bindings they carry.
  HostEncoding host_;
  uint64_t offset_calls_ = 0, range_calls_ = 0, range_bindings_ = 0;
  std::vector<id> in_flight_;  // committed command buffers not yet waited for
  std::vector<id> libraries_, pipelines_;
  std::vector<size_t> max_threads_;
};

}  // namespace

std::unique_ptr<Runtime> make_metal_runtime() { return std::make_unique<MetalRuntime>(); }

}  // namespace moelens::gpu
