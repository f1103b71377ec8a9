#include "gpu_backend.h"

#include "call.h"

namespace moelens::gpu {

using shader::WeightDesc;

// ---- buffers ----

GpuBuffer::GpuBuffer(GpuBackend& owner, ElemType type, size_t count)
    : Buffer(type, count), owner_(owner), device_(owner.runtime_->create(std::max<size_t>(16, count * elem_bytes(type)))) {}

GpuBuffer::~GpuBuffer() { owner_.release(device_); }

void GpuBackend::release(DeviceBuffer* b) {
  auto lock = enter();
  forget_int16_form(b);
  if (pending_) graveyard_.push_back(b);  // recorded work may still use it
  else runtime_->destroy(b);
}

// ---- recording ----

bool parse_precision(const std::string& name, Precision* out) {
  if (name == "fp32") *out = Precision::F32;
  else if (name == "fp16") *out = Precision::F16;
  else return false;
  return true;
}

GpuBackend::GpuBackend(std::unique_ptr<Runtime> runtime, Precision precision)
    : runtime_(std::move(runtime)), precision_(precision) {
  dummy_ = std::make_unique<GpuBuffer>(*this, ElemType::F32, 4);
}

GpuBackend::~GpuBackend() {
  try {
    auto lock = enter();
    if (pending_) finish_locked();
  } catch (const std::exception&) {
    // The work failed and nobody waits for its result; what matters now is freeing the buffers.
  }
  // The scratch buffers are members declared after runtime_ and mu_, so they are destroyed (and release
  // their device memory through them) before either.
}

void GpuBackend::submit(const Dispatch& d) {
  if (int16_form_.valid)  // the set bits only: a launch writes one to four of its bindings
    for (uint32_t m = k::kInfo[d.kernel].written_mask; m != 0; m &= m - 1) forget_int16_form(d.buffers[__builtin_ctz(m)].buffer);
  runtime_->dispatch(d);
  pending_ = true;
  ++dispatches_;
  ++by_kernel_[size_t(d.kernel)];
  fencing_ += d.fences_next ? 1 : 0;
}

void GpuBackend::finish_locked() {
  runtime_->finish();
  pending_ = false;
  for (DeviceBuffer* b : graveyard_) runtime_->destroy(b);
  graveyard_.clear();
}

void GpuBackend::synchronize() {
  auto lock = enter();
  if (pending_) finish_locked();
}

void GpuBackend::flush() {
  auto lock = enter();
  if (pending_) runtime_->submit();  // pending_ stays set: finish_locked() still waits for it
}

// A prompt chunk's kernels launch one after another: overlapping each launch with the previous kernel
// measured 27 % slower at 512 tokens on the H200 (docs/metal.md, "CUDA launches"), and they launch
// directly rather than through a graph, whose per-call node updates cost the host 2.2 ms before a
// 512-token chunk started (reports/2026-12-02-h200-l1-traffic.md): Dispatch::prompt.
void GpuBackend::begin_chunk(int n) {
  auto lock = enter();
  prompt_ = n >= prefill_min_tokens_;
}

void GpuBackend::scratch(std::unique_ptr<GpuBuffer>& slot, size_t floats) {
  if (!slot || slot->count() < floats) slot = std::make_unique<GpuBuffer>(*this, ElemType::F32, floats);
}

// ---- memory ----

std::unique_ptr<Buffer> GpuBackend::alloc(ElemType type, size_t count) {
  auto lock = enter();
  return std::make_unique<GpuBuffer>(*this, type, count);
}

std::unique_ptr<Buffer> GpuBackend::upload(const std::vector<float>& values) {
  auto lock = enter();
  auto b = std::make_unique<GpuBuffer>(*this, ElemType::F32, values.size());
  write(View(b.get()), values.data(), values.size());
  return b;
}

std::unique_ptr<Weight> GpuBackend::upload(const LinearWeight& w) {
  auto lock = enter();
  if (pending_) finish_locked();  // weights are written directly, which the Runtime allows only when idle
  auto g = std::make_unique<GpuWeight>();
  WeightDesc& d = g->desc;
  const int64_t experts = std::max<int64_t>(1, w.experts);
  g->experts = w.experts;
  d.rows = u32(size_t(w.rows), "rows");
  d.cols = u32(size_t(w.cols), "columns");
  d.row_bytes = u32(w.row_bytes(), "row bytes");
  if (d.row_bytes % 16 != 0)
    fail(w.name, ": rows of ", d.row_bytes, " bytes; the GPU kernels read rows in 16-byte chunks");
  const uint32_t row_words = d.row_bytes / 4;
  d.row_word_shift = ROW_WORDS_ANY;
  if ((row_words & (row_words - 1)) == 0)
    for (d.row_word_shift = 0; (1u << d.row_word_shift) < row_words;) ++d.row_word_shift;
  if (w.quantized()) {
    if (w.bits != 4 && w.bits != 8) fail(w.name, ": ", w.bits, "-bit weights; the GPU kernels take 4 and 8 bits");
    const int chunk = w.bits == 4 ? 32 : 16;  // weights per 16-byte chunk: one chunk must lie in one group
    if (w.group_size % chunk != 0)
      fail(w.name, ": group size ", w.group_size, "; the GPU kernels need a multiple of ", chunk, " at ", w.bits, " bits");
    d.format = w.bits == 4 ? WEIGHT_Q4 : WEIGHT_Q8;
    d.group_size = u32(size_t(w.group_size), "group size");
    const int words_per_group = w.group_size / (32 / w.bits);
    if (words_per_group & (words_per_group - 1))
      fail(w.name, ": group size ", w.group_size, "; the GPU kernels need a power of two");
    for (d.group_shift = 0; (1 << d.group_shift) < words_per_group;) ++d.group_shift;
    d.scale_row_bytes = u32((w.scale_row_bytes() + 3) / 4 * 4, "scale row bytes");  // rows padded to 4 bytes
    switch (w.scale_dtype) {
      case DType::BF16: d.scale_type = SCALE_BF16; break;
      case DType::F16: d.scale_type = SCALE_F16; break;
      case DType::F32: d.scale_type = SCALE_F32; break;
      default: fail(w.name, ": scales of type ", dtype_name(w.scale_dtype), "; the GPU kernels take bf16, f16, f32");
    }
  } else {
    switch (w.dtype) {
      case DType::BF16: d.format = WEIGHT_BF16; break;
      case DType::F16: d.format = WEIGHT_F16; break;
      case DType::F32: d.format = WEIGHT_F32; break;
      default: fail(w.name, ": dense weights of type ", dtype_name(w.dtype), "; the GPU kernels take bf16, f16, f32");
    }
  }
  const size_t matrix_bytes = size_t(w.rows) * d.row_bytes;
  g->data = std::make_unique<GpuBuffer>(*this, ElemType::I32, (size_t(experts) * matrix_bytes + 3) / 4);
  for (int64_t e = 0; e < experts; ++e)
    runtime_->write(g->data->device(), size_t(e) * matrix_bytes, w.data[size_t(e)], matrix_bytes);
  if (w.quantized()) {
    const size_t scale_bytes = size_t(w.rows) * d.scale_row_bytes, stored = w.scale_row_bytes();
    g->scales = std::make_unique<GpuBuffer>(*this, ElemType::I32, size_t(experts) * scale_bytes / 4);
    g->biases = std::make_unique<GpuBuffer>(*this, ElemType::I32, size_t(experts) * scale_bytes / 4);
    std::vector<unsigned char> padded(stored == d.scale_row_bytes ? 0 : scale_bytes);
    auto put = [&](GpuBuffer& dst, size_t at, const void* src) {  // one expert's rows, padded if needed
      if (padded.empty()) return runtime_->write(dst.device(), at, src, scale_bytes);
      for (int64_t r = 0; r < w.rows; ++r)
        std::memcpy(&padded[size_t(r) * d.scale_row_bytes], static_cast<const unsigned char*>(src) + size_t(r) * stored, stored);
      runtime_->write(dst.device(), at, padded.data(), scale_bytes);
    };
    for (int64_t e = 0; e < experts; ++e) {
      put(*g->scales, size_t(e) * scale_bytes, w.scales[size_t(e)]);
      put(*g->biases, size_t(e) * scale_bytes, w.biases[size_t(e)]);
    }
    g->scales_exact_in_half = scales_exact_in_half(w);
  }
  return g;
}

// Whether every scale and bias of a quantized matrix is zero or a normal half exactly: bf16 with an
// exponent within half's normal range (its 7 mantissa bits fit half's 10), f16 normal, f32 within half's
// range with half's precision. Bit tests per value without early exits inside a matrix, so that the
// loops over a checkpoint's scales (about 1/16 of its bytes) vectorise.
bool GpuBackend::scales_exact_in_half(const LinearWeight& w) {
  const size_t count = size_t(w.rows) * size_t(w.scale_row_bytes()) / dtype_size(w.scale_dtype);
  auto all = [count](const void* values, auto exact, auto bits) {
    const auto* v = static_cast<const decltype(bits)*>(values);
    bool ok = true;
    for (size_t i = 0; i < count; ++i) ok &= exact(v[i]);
    return ok;
  };
  auto bf16 = [](uint16_t v) {
    const uint32_t e = (v >> 7) & 0xffu;
    return (v & 0x7fffu) == 0 || (e >= 127 - 14 && e <= 127 + 15);
  };
  auto f16 = [](uint16_t v) {
    const uint32_t e = (v >> 10) & 0x1fu;
    return (v & 0x7fffu) == 0 || (e >= 1 && e <= 30);
  };
  auto f32 = [](uint32_t v) {
    const uint32_t e = (v >> 23) & 0xffu, magnitude = v & 0x7fffffffu;
    return magnitude == 0 || (e >= 127 - 14 && magnitude <= 0x477fe000u && (v & 0x1fffu) == 0);  // 0x477fe000: 65504
  };
  for (int64_t e = 0; e < std::max<int64_t>(1, w.experts); ++e)
    for (const void* values : {w.scales[size_t(e)], w.biases[size_t(e)]}) {
      const bool ok = w.scale_dtype == DType::BF16  ? all(values, bf16, uint16_t{})
                      : w.scale_dtype == DType::F16 ? all(values, f16, uint16_t{})
                                                    : all(values, f32, uint32_t{});
      if (!ok) return false;
    }
  return true;
}

void GpuBackend::write(View dst, const void* src, size_t count) {
  auto lock = enter();
  if (!count) return;
  auto* b = static_cast<GpuBuffer*>(dst.buf);
  const size_t e = elem_bytes(b->type());
  forget_int16_form(b->device());
  if (!pending_) return runtime_->write(b->device(), dst.offset * e, src, count * e);
  // Recorded work may still read dst: stage the data and copy it in order with that work, finished before
  // the next launch starts (it may read weights before it waits: Dispatch::fences_next).
  GpuBuffer staging(*this, b->type(), count);
  runtime_->write(staging.device(), 0, src, count * e);
  record_copy(dst, View(&staging), count, true);
}

void GpuBackend::read(View src, void* dst, size_t count) {
  auto lock = enter();
  if (pending_) finish_locked();
  const size_t e = elem_bytes(src.buf->type());
  if (count) runtime_->read(static_cast<GpuBuffer*>(src.buf)->device(), src.offset * e, dst, count * e);
}

void GpuBackend::copy(View dst, View src, size_t count) { record_copy(dst, src, count, false); }

void GpuBackend::record_copy(View dst, View src, size_t count, bool fences_next) {
  auto lock = enter();
  if (dst.buf == src.buf && dst.offset < src.offset + count && src.offset < dst.offset + count && dst.offset != src.offset)
    fail("gpu backend: copy between overlapping ranges of one buffer");
  if (dst.buf == src.buf && dst.offset == src.offset) return;
  const bool from_half = src.buf->type() == ElemType::F16, to_half = dst.buf->type() == ElemType::F16;
  shader::ElementwiseParams p{u32(count, "copy size"), 0.f, 0u};
  k::Id id = k::copy_words::id;
  if (from_half != to_half) {  // a conversion: between F16 and F32
    if ((from_half ? dst : src).buf->type() != ElemType::F32) fail("gpu backend: F16 converts to and from F32 only");
    id = to_half ? k::copy_to_half::id : k::copy_from_half::id;
  } else if (from_half) {  // halves, two to a word
    if (count % 2 != 0 || dst.offset % 2 != 0 || src.offset % 2 != 0)
      fail("gpu backend: F16 copies take an even number of halves from even offsets");
    p.count = u32(count / 2, "copy size");
  }
  static_assert(k::copy_words::dst == k::copy_to_half::dst && k::copy_words::src == k::copy_to_half::src &&
                    k::copy_words::p == k::copy_to_half::p && k::copy_words::dst == k::copy_from_half::dst &&
                    k::copy_words::src == k::copy_from_half::src && k::copy_words::p == k::copy_from_half::p,
                "copy_words, copy_to_half, copy_from_half: the same bindings");
  Call call(*this, id);
  call.buf(k::copy_words::dst, dst).buf(k::copy_words::src, src).params(k::copy_words::p, p)
      .grid(ceil_div(p.count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS);
  if (fences_next) call.fence_next();
  call.run();
}

void GpuBackend::fill(View dst, float value, size_t count) {
  auto lock = enter();
  if (dst.buf->type() == ElemType::F16) fail("gpu backend: fill of an F16 buffer");
  shader::ElementwiseParams p{u32(count, "fill size"), 0.f, 0u};
  std::memcpy(&p.value, &value, 4);
  Call(*this, k::fill_words::id).buf(k::fill_words::dst, dst).params(k::fill_words::p, p)
      .grid(ceil_div(count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
}

std::unique_lock<std::recursive_mutex> GpuBackend::enter() {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  flush_add();
  return lock;
}

void GpuBackend::forget_int16_form(const DeviceBuffer* b) {
  if (int16_form_.valid && b && b == static_cast<GpuBuffer*>(int16_form_.out.buf)->device()) int16_form_.valid = false;
}

void GpuBackend::flush_add() {
  if (!add_.active) return;
  add_.active = false;
  shader::ElementwiseParams p{u32(add_.count, "add size"), add_.scale, 0u};
  Call(*this, k::add_scaled::id).buf(k::add_scaled::a, add_.a).buf(k::add_scaled::b, add_.b).params(k::add_scaled::p, p)
      .grid(ceil_div(add_.count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
}

}  // namespace moelens::gpu
