// The Foundation and Metal classes of the mock Objective-C runtime: exactly the methods the Metal host
// (metal_runtime.cpp) calls, with Metal's semantics where the host depends on them. The "compiler"
// accepts only the MSL sources embedded at build time (whose kernels were translated for the
// emulator); a command buffer runs its dispatches on the CPU emulator when committed, in the thread
// order named by MOELENS_EMU_ORDER (forward, reverse or random; default forward).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../emulator/emu_runtime.h"
#include "../../emulator/emulator.h"
#include "kernels.h"
#include "objc_mock.h"

namespace moelens::gpu::kernels {
extern const char* const kSources[];
}

namespace moelens::objc_mock {

namespace {

using objc::MTLSize;
using objc::NSInteger;
using objc::NSUInteger;
namespace k = gpu::kernels;

struct String : Object {
  explicit String(std::string s) : Object(instance_class("NSString")), text(std::move(s)) {}
  std::string text;
};

struct Error : Object {
  explicit Error(std::string m) : Object(instance_class("NSError")), message(std::move(m)) {}
  std::string message;
};

struct CompileOptions : Object {
  CompileOptions() : Object(instance_class("MTLCompileOptions")) {}
  NSUInteger language_version = 0;
  bool fast_math = true;
};

struct Buffer : Object {
  explicit Buffer(size_t n) : Object(instance_class("MTLBuffer")), bytes(n), data(gpu::emu_map_buffer(n)) {}
  ~Buffer() override { gpu::emu_unmap_buffer(data, bytes); }
  size_t bytes;
  void* data;  // zero-filled, with a guard page after the end
};

struct Library : Object {
  explicit Library(int f) : Object(instance_class("MTLLibrary")), file(f) {}
  int file;
};

struct Function : Object {
  explicit Function(int k) : Object(instance_class("MTLFunction")), kernel(k) {}
  int kernel;
};

struct Pipeline : Object {
  explicit Pipeline(int k) : Object(instance_class("MTLComputePipelineState")), kernel(k) {}
  int kernel;
};

struct Recorded {
  int kernel;
  gpu::Dispatch d;
  Buffer* buffers[gpu::kMaxBindings];  // retained until the command buffer goes
};

struct CommandBuffer : Object {
  CommandBuffer() : Object(instance_class("MTLCommandBuffer")) {}
  ~CommandBuffer() override {
    for (Recorded& r : work)
      for (Buffer* b : r.buffers)
        if (b && --b->refs == 0) delete b;
  }
  std::vector<Recorded> work;
  NSInteger status = 0;  // MTLCommandBufferStatusNotEnqueued
  std::string error;
};

// One entry of an encoder's argument table: a buffer at an offset, or bytes (setBytes), or nothing.
// Binding either at an index replaces what was there.
struct Argument {
  Buffer* buffer = nullptr;
  size_t offset = 0;
  bool has_bytes = false;
  std::vector<unsigned char> bytes;
};

// The encoder keeps its pipeline and argument table from one dispatch to the next, as Metal's does; a
// dispatch gives the kernel what the table holds at the indices its function declares.
struct Encoder : Object {
  explicit Encoder(CommandBuffer* c) : Object(instance_class("MTLComputeCommandEncoder")), cb(c) { ++cb->refs; }
  ~Encoder() override {
    if (--cb->refs == 0) delete cb;
  }
  CommandBuffer* cb;
  Pipeline* pipeline = nullptr;
  Argument arguments[gpu::kMaxBindings];
  bool ended = false;
};

struct Device : Object {
  Device() : Object(instance_class("MTLDevice")) {}
};

struct Queue : Object {
  Queue() : Object(instance_class("MTLCommandQueue")) {}
};

constexpr NSInteger kStatusCompleted = 4, kStatusError = 5;

void fatal(const std::string& what) {
  std::fprintf(stderr, "mock Metal: %s\n", what.c_str());
  std::abort();
}

msl_emu::Order order_from_environment() {
  const char* s = std::getenv("MOELENS_EMU_ORDER");
  msl_emu::Order o = msl_emu::Order::Forward;
  if (s && *s && !msl_emu::parse_order(s, &o)) fatal(std::string("MOELENS_EMU_ORDER=") + s + " (forward, reverse, random)");
  return o;
}

// ---- NSString, NSError, MTLCompileOptions ----
id string_with_utf8(id, SEL, const char* s) { return autorelease(new String(s ? s : "")); }
const char* utf8(id self, SEL) { return as<String>(self)->text.c_str(); }
id error_description(id self, SEL) { return autorelease(new String(as<Error>(self)->message)); }
id options_alloc(id, SEL) { return to_id(new CompileOptions()); }
id options_init(id self, SEL) { return self; }
void options_set_version(id self, SEL, NSUInteger v) { as<CompileOptions>(self)->language_version = v; }
void options_set_fast_math(id self, SEL, bool on) { as<CompileOptions>(self)->fast_math = on; }

// ---- MTLDevice ----
id device_name(id, SEL) { return autorelease(new String("moelens mock Metal device (CPU emulator)")); }
id device_new_queue(id, SEL) { return to_id(new Queue()); }
id device_new_buffer(id, SEL, NSUInteger length, NSUInteger options) {
  if (options != 0) fatal("newBufferWithLength: only shared storage (options 0) is emulated");
  return to_id(new Buffer(length));
}
id device_new_library(id, SEL, id source, id options, id* error) {
  const CompileOptions* o = as<CompileOptions>(options);
  if (o->language_version != (3 << 16)) fatal("newLibraryWithSource: the host must ask for MSL 3.0");
  if (o->fast_math) fatal("newLibraryWithSource: the host must turn fast math off");
  const std::string& text = as<String>(source)->text;
  for (int f = 0; f < k::kSourceCount; ++f)
    if (text == k::kSources[f]) return to_id(new Library(f));
  if (error) *error = autorelease(new Error("mock Metal compiler: this source was not translated at build time"));
  return nullptr;
}
id device_new_pipeline(id, SEL, id function, id* error) {
  if (!function) {
    if (error) *error = autorelease(new Error("no function"));
    return nullptr;
  }
  return to_id(new Pipeline(as<Function>(function)->kernel));
}

// ---- MTLLibrary, MTLComputePipelineState, MTLBuffer ----
id library_new_function(id self, SEL, id name) {
  const std::string& n = as<String>(name)->text;
  for (int kernel = 0; kernel < k::kCount; ++kernel)
    if (k::kInfo[kernel].file == as<Library>(self)->file && n == k::kInfo[kernel].name) return to_id(new Function(kernel));
  return nullptr;
}
NSUInteger pipeline_max_threads(id, SEL) { return 1024; }
void* buffer_contents(id self, SEL) { return as<Buffer>(self)->data; }
NSUInteger buffer_length(id self, SEL) { return as<Buffer>(self)->bytes; }

// ---- MTLCommandQueue, MTLCommandBuffer ----
id queue_command_buffer(id, SEL) { return autorelease(new CommandBuffer()); }
id command_buffer_encoder(id self, SEL) { return autorelease(new Encoder(as<CommandBuffer>(self))); }
void command_buffer_commit(id self, SEL) {
  CommandBuffer* cb = as<CommandBuffer>(self);
  if (cb->status != 0) fatal("commit of a command buffer twice");
  msl_emu::set_order(order_from_environment());
  cb->status = kStatusCompleted;
  for (const Recorded& r : cb->work) {
    void* base[gpu::kMaxBindings] = {};
    for (int i = 0; i < gpu::kMaxBindings; ++i) base[i] = r.buffers[i] ? r.buffers[i]->data : nullptr;
    try {
      gpu::emu_run_dispatch(r.d, base);
    } catch (const std::exception& e) {
      cb->status = kStatusError;
      cb->error = e.what();
      return;
    }
  }
}
void command_buffer_wait(id self, SEL) {
  if (as<CommandBuffer>(self)->status == 0) fatal("waitUntilCompleted before commit");
}
NSInteger command_buffer_status(id self, SEL) { return as<CommandBuffer>(self)->status; }
id command_buffer_error(id self, SEL) {
  CommandBuffer* cb = as<CommandBuffer>(self);
  return cb->status == kStatusError ? autorelease(new Error(cb->error)) : nullptr;
}

// ---- MTLComputeCommandEncoder ----
Encoder* open_encoder(id self) {
  Encoder* e = as<Encoder>(self);
  if (e->ended) fatal("use of an encoder after endEncoding");
  return e;
}
void encoder_set_pipeline(id self, SEL, id pipeline) { open_encoder(self)->pipeline = as<Pipeline>(pipeline); }
Argument& argument(Encoder* e, NSUInteger index, const char* method) {
  if (index >= NSUInteger(gpu::kMaxBindings)) fatal(std::string(method) + " index " + std::to_string(index));
  return e->arguments[index];
}
void encoder_set_buffer(id self, SEL, id buffer, NSUInteger offset, NSUInteger index) {
  Argument& a = argument(open_encoder(self), index, "setBuffer:offset:atIndex:");
  a = Argument{};
  a.buffer = as<Buffer>(buffer);
  a.offset = offset;
}
// Metal: a new offset for the buffer already bound at the index.
void encoder_set_buffer_offset(id self, SEL, NSUInteger offset, NSUInteger index) {
  Argument& a = argument(open_encoder(self), index, "setBufferOffset:atIndex:");
  if (!a.buffer) fatal("setBufferOffset:atIndex: index " + std::to_string(index) + " has no buffer bound");
  a.offset = offset;
}
void encoder_set_buffers(id self, SEL, const id* buffers, const NSUInteger* offsets, objc::NSRange range) {
  Encoder* e = open_encoder(self);
  if (range.length == 0 || range.location + range.length > NSUInteger(gpu::kMaxBindings))
    fatal("setBuffers:offsets:withRange: range " + std::to_string(range.location) + "+" + std::to_string(range.length));
  for (NSUInteger j = 0; j < range.length; ++j) {
    Argument& a = e->arguments[range.location + j];
    a = Argument{};
    a.buffer = as<Buffer>(buffers[j]);
    a.offset = offsets[j];
  }
}
void encoder_set_bytes(id self, SEL, const void* bytes, NSUInteger length, NSUInteger index) {
  Argument& a = argument(open_encoder(self), index, "setBytes:length:atIndex:");
  if (length > 4096) fatal("setBytes: over 4 KiB (Metal's limit)");
  a = Argument{};
  a.has_bytes = true;
  a.bytes.assign(static_cast<const unsigned char*>(bytes), static_cast<const unsigned char*>(bytes) + length);
}
void encoder_dispatch(id self, SEL, MTLSize groups, MTLSize threads) {
  Encoder* e = open_encoder(self);
  if (!e->pipeline) fatal("dispatchThreadgroups without a pipeline state");
  const k::Info& info = k::kInfo[e->pipeline->kernel];
  Recorded r{e->pipeline->kernel, {}, {}};
  r.d.kernel = r.kernel;
  for (int i = 0; i < gpu::kMaxBindings; ++i) {
    const Argument& a = e->arguments[i];
    if (!(info.buffer_mask >> i & 1u) || !a.buffer) continue;  // an unbound buffer fails the launch's check
    r.buffers[i] = a.buffer;
    ++a.buffer->refs;  // a command buffer retains the buffers it uses
    if (a.offset > a.buffer->bytes) fatal("setBuffer offset past the end of the buffer");
    r.d.buffers[i].offset = a.offset;
  }
  if (info.params_index >= 0 && e->arguments[info.params_index].has_bytes) {
    const std::vector<unsigned char>& bytes = e->arguments[info.params_index].bytes;
    if (bytes.size() > sizeof r.d.params) fatal("parameter struct larger than the emulator's launch slot");
    std::memcpy(r.d.params, bytes.data(), bytes.size());
    r.d.params_size = bytes.size();
    r.d.params_index = info.params_index;
  }
  const NSUInteger g[3] = {groups.width, groups.height, groups.depth}, t[3] = {threads.width, threads.height, threads.depth};
  for (int i = 0; i < 3; ++i) {
    r.d.grid[i] = uint32_t(g[i]);
    r.d.threads[i] = uint32_t(t[i]);
  }
  e->cb->work.push_back(r);
}
void encoder_end(id self, SEL) { open_encoder(self)->ended = true; }

}  // namespace

void register_foundation_classes() {
  add_method("NSString", "stringWithUTF8String:", imp(&string_with_utf8), true);
  add_method("NSString", "UTF8String", imp(&utf8));
  add_method("NSError", "localizedDescription", imp(&error_description));
  add_method("MTLCompileOptions", "alloc", imp(&options_alloc), true);
  add_method("MTLCompileOptions", "init", imp(&options_init));
  add_method("MTLCompileOptions", "setLanguageVersion:", imp(&options_set_version));
  add_method("MTLCompileOptions", "setFastMathEnabled:", imp(&options_set_fast_math));
  add_method("MTLDevice", "name", imp(&device_name));
  add_method("MTLDevice", "newCommandQueue", imp(&device_new_queue));
  add_method("MTLDevice", "newBufferWithLength:options:", imp(&device_new_buffer));
  add_method("MTLDevice", "newLibraryWithSource:options:error:", imp(&device_new_library));
  add_method("MTLDevice", "newComputePipelineStateWithFunction:error:", imp(&device_new_pipeline));
  add_method("MTLLibrary", "newFunctionWithName:", imp(&library_new_function));
  add_method("MTLComputePipelineState", "maxTotalThreadsPerThreadgroup", imp(&pipeline_max_threads));
  add_method("MTLBuffer", "contents", imp(&buffer_contents));
  add_method("MTLBuffer", "length", imp(&buffer_length));
  add_method("MTLCommandQueue", "commandBuffer", imp(&queue_command_buffer));
  add_method("MTLCommandBuffer", "computeCommandEncoder", imp(&command_buffer_encoder));
  add_method("MTLCommandBuffer", "commit", imp(&command_buffer_commit));
  add_method("MTLCommandBuffer", "waitUntilCompleted", imp(&command_buffer_wait));
  add_method("MTLCommandBuffer", "status", imp(&command_buffer_status));
  add_method("MTLCommandBuffer", "error", imp(&command_buffer_error));
  add_method("MTLComputeCommandEncoder", "setComputePipelineState:", imp(&encoder_set_pipeline));
  add_method("MTLComputeCommandEncoder", "setBuffer:offset:atIndex:", imp(&encoder_set_buffer));
  add_method("MTLComputeCommandEncoder", "setBufferOffset:atIndex:", imp(&encoder_set_buffer_offset));
  add_method("MTLComputeCommandEncoder", "setBuffers:offsets:withRange:", imp(&encoder_set_buffers));
  add_method("MTLComputeCommandEncoder", "setBytes:length:atIndex:", imp(&encoder_set_bytes));
  add_method("MTLComputeCommandEncoder", "dispatchThreadgroups:threadsPerThreadgroup:", imp(&encoder_dispatch));
  add_method("MTLComputeCommandEncoder", "endEncoding", imp(&encoder_end));
}

}  // namespace moelens::objc_mock

extern "C" __attribute__((visibility("hidden"))) id MTLCreateSystemDefaultDevice(void) {
  objc_getClass("MTLDevice");  // registers the mock classes
  return moelens::objc_mock::to_id(new moelens::objc_mock::Device());
}
