#include "gpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../../core/error.h"

namespace moelens::gpu {

namespace k = kernels;
using shader::WeightDesc;

namespace {

uint32_t u32(size_t v, const char* what) {
  if (v > 0xffffffffu) fail("gpu backend: ", what, " of ", v, " does not fit the kernels' 32-bit counts");
  return uint32_t(v);
}

uint32_t ceil_div(size_t a, size_t b) { return u32((a + b - 1) / b, "grid size"); }

// Threads for a norm over rows of `dim`: enough for NORM_MAX_PER_THREAD values each.
uint32_t norm_threads(int dim) {
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
uint32_t split_k(size_t blocks, size_t tokens, size_t row_words, size_t unroll) {
  uint32_t split = 1;
  while (split < GEMV_SIMDGROUPS && size_t(split) * 2 * 32 * unroll <= row_words &&
         size_t(ceil_div(blocks, GEMV_SIMDGROUPS / split)) * tokens < GEMV_TARGET_THREADGROUPS)
    split *= 2;
  return split;
}

// Partial results of one attention launch stay below this many floats (longer prefills are split).
constexpr size_t kMaxAttentionPartialFloats = size_t(8) << 20;

}  // namespace

// ---- buffers ----

GpuBuffer::GpuBuffer(GpuBackend& owner, ElemType type, size_t count)
    : Buffer(type, count), owner_(owner), device_(owner.runtime_->create(std::max<size_t>(16, count * 4))) {}

GpuBuffer::~GpuBuffer() { owner_.release(device_); }

void GpuBackend::release(DeviceBuffer* b) {
  auto lock = enter();
  if (pending_) graveyard_.push_back(b);  // recorded work may still use it
  else runtime_->destroy(b);
}

// ---- recording ----

// One kernel launch being described: bindings by the kernel's parameter indices (kernels.h).
class GpuBackend::Call {
 public:
  Call(GpuBackend& be, k::Id id) : be_(be) { d_.kernel = int(id); }
  Call& buf(int index, View v) {
    if (!v) fail("gpu backend: kernel ", k::kInfo[d_.kernel].name, ": buffer ", index, " is missing");
    d_.buffers[index] = {static_cast<GpuBuffer*>(v.buf)->device(), v.offset * 4};
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
  void run() {
    if (d_.grid[0] && d_.grid[1] && d_.grid[2]) be_.submit(d_);
  }

 private:
  GpuBackend& be_;
  Dispatch d_;
};

GpuBackend::GpuBackend(std::unique_ptr<Runtime> runtime) : runtime_(std::move(runtime)) {
  dummy_ = std::make_unique<GpuBuffer>(*this, ElemType::F32, 4);
}

GpuBackend::~GpuBackend() {
  try {
    auto lock = enter();
    if (pending_) finish_locked();
  } catch (const std::exception&) {
    // The work failed and nobody waits for its result; what matters now is freeing the buffers.
  }
  dummy_.reset();
  moe_h_.reset();
  moe_shared_h_.reset();
  attn_ml_.reset();
  attn_o_.reset();
  attn_lse_.reset();
  argmax_parts_.reset();
}

void GpuBackend::submit(const Dispatch& d) {
  runtime_->dispatch(d);
  pending_ = true;
  ++dispatches_;
  ++by_kernel_[size_t(d.kernel)];
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
  }
  return g;
}

void GpuBackend::write(View dst, const void* src, size_t count) {
  auto lock = enter();
  if (!count) return;
  auto* b = static_cast<GpuBuffer*>(dst.buf);
  if (!pending_) return runtime_->write(b->device(), dst.offset * 4, src, count * 4);
  // Recorded work may still read dst: stage the data and copy it in order with that work.
  GpuBuffer staging(*this, ElemType::F32, count);
  runtime_->write(staging.device(), 0, src, count * 4);
  copy(dst, View(&staging), count);
}

void GpuBackend::read(View src, void* dst, size_t count) {
  auto lock = enter();
  if (pending_) finish_locked();
  if (count) runtime_->read(static_cast<GpuBuffer*>(src.buf)->device(), src.offset * 4, dst, count * 4);
}

void GpuBackend::copy(View dst, View src, size_t count) {
  auto lock = enter();
  if (dst.buf == src.buf && dst.offset < src.offset + count && src.offset < dst.offset + count && dst.offset != src.offset)
    fail("gpu backend: copy between overlapping ranges of one buffer");
  if (dst.buf == src.buf && dst.offset == src.offset) return;
  shader::ElementwiseParams p{u32(count, "copy size"), 0.f, 0u};
  Call(*this, k::copy_words::id).buf(k::copy_words::dst, dst).buf(k::copy_words::src, src).params(k::copy_words::p, p)
      .grid(ceil_div(count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
}

void GpuBackend::fill(View dst, float value, size_t count) {
  auto lock = enter();
  shader::ElementwiseParams p{u32(count, "fill size"), 0.f, 0u};
  std::memcpy(&p.value, &value, 4);
  Call(*this, k::fill_words::id).buf(k::fill_words::dst, dst).params(k::fill_words::p, p)
      .grid(ceil_div(count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
}

// ---- kernels ----

void GpuBackend::embed(const Weight& table, View ids, int n, View out) {
  auto lock = enter();
  const auto& w = static_cast<const GpuWeight&>(table);
  shader::EmbedParams p{w.desc, u32(size_t(n), "tokens")};
  Call(*this, k::embed::id).buf(k::embed::data, w.data.get()).buf(k::embed::scales, w.scales.get())
      .buf(k::embed::biases, w.biases.get()).buf(k::embed::ids, ids).buf(k::embed::out, out).params(k::embed::p, p)
      .grid(ceil_div(w.desc.cols, ELEMENTWISE_THREADS), p.n).threads(ELEMENTWISE_THREADS).run();
}

void GpuBackend::rms_norm(View x, View weight, int rows, int dim, float eps, View out) {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  if (add_.active && add_.a.buf == x.buf && add_.a.offset == x.offset && add_.count == size_t(rows) * size_t(dim)) {
    add_.active = false;
    shader::AddNormParams p{u32(size_t(rows), "rows"), u32(size_t(dim), "dim"), eps, weight ? 1u : 0u, add_.scale};
    namespace an = k::add_rms_norm;
    Call(*this, an::id).buf(an::h, x).buf(an::a, add_.b).opt(an::weight, weight).buf(an::out, out).params(an::p, p)
        .grid(p.rows).threads(norm_threads(dim)).run();
    return;
  }
  flush_add();
  shader::NormParams p{u32(size_t(rows), "rows"), u32(size_t(dim), "dim"), eps, weight ? 1u : 0u};
  Call(*this, k::rms_norm::id).buf(k::rms_norm::x, x).opt(k::rms_norm::weight, weight).buf(k::rms_norm::out, out)
      .params(k::rms_norm::p, p).grid(p.rows).threads(norm_threads(dim)).run();
}

void GpuBackend::add(View a, View b, size_t count, float s) {
  auto lock = enter();
  add_ = {a, b, count, s, true};
}

std::unique_lock<std::recursive_mutex> GpuBackend::enter() {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  flush_add();
  return lock;
}

void GpuBackend::flush_add() {
  if (!add_.active) return;
  add_.active = false;
  shader::ElementwiseParams p{u32(add_.count, "add size"), add_.scale, 0u};
  Call(*this, k::add_scaled::id).buf(k::add_scaled::a, add_.a).buf(k::add_scaled::b, add_.b).params(k::add_scaled::p, p)
      .grid(ceil_div(add_.count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
}

void GpuBackend::scale(View x, float s, size_t count) {
  auto lock = enter();
  shader::ElementwiseParams p{u32(count, "scale size"), s, 0u};
  Call(*this, k::scale_values::id).buf(k::scale_values::x, x).params(k::scale_values::p, p)
      .grid(ceil_div(count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
}

void GpuBackend::gemv_jobs(const MatmulJob* jobs, size_t count, View x, int n) {
  shader::GemvParams p{};
  p.jobs = u32(count, "jobs");
  p.n = u32(size_t(n), "tokens");
  Call call(*this, k::gemv::id);
  const int w_at[] = {k::gemv::w0, k::gemv::w1, k::gemv::w2, k::gemv::w3};
  const int s_at[] = {k::gemv::s0, k::gemv::s1, k::gemv::s2, k::gemv::s3};
  const int b_at[] = {k::gemv::b0, k::gemv::b1, k::gemv::b2, k::gemv::b3};
  const int o_at[] = {k::gemv::out0, k::gemv::out1, k::gemv::out2, k::gemv::out3};
  for (size_t j = 0; j < GEMV_MAX_JOBS; ++j) {
    if (j >= count) {  // unused slots: bound, never read
      call.buf(w_at[j], nullptr).buf(s_at[j], nullptr).buf(b_at[j], nullptr).buf(o_at[j], nullptr);
      continue;
    }
    const auto& w = static_cast<const GpuWeight&>(*jobs[j].weight);
    if (w.experts) fail("gpu backend: matmul of an expert stack");
    if (j > 0 && w.desc.cols != p.cols) fail("gpu backend: matmul_group of matrices with different input sizes");
    p.w[j] = w.desc;
    p.cols = w.desc.cols;
    p.first_block[j] = p.total_blocks;
    p.total_blocks += ceil_div(w.desc.rows, GEMV_ROWS);
    call.buf(w_at[j], w.data.get()).buf(s_at[j], w.scales.get()).buf(b_at[j], w.biases.get()).buf(o_at[j], jobs[j].out);
  }
  p.x_vec4 = x.offset % 4 == 0 && p.cols % 4 == 0 ? 1u : 0u;
  size_t min_row_words = SIZE_MAX;
  for (size_t j = 0; j < count; ++j) min_row_words = std::min<size_t>(min_row_words, p.w[j].row_bytes / 4);
  p.split = split_k(p.total_blocks, p.n, min_row_words, GEMV_UNROLL);
  call.buf(k::gemv::x, x).params(k::gemv::p, p).grid(ceil_div(p.total_blocks, GEMV_SIMDGROUPS / p.split), p.n)
      .threads(GEMV_THREADS).run();
}

void GpuBackend::matmul(const Weight& w, View x, int n, View out) {
  auto lock = enter();
  MatmulJob job{&w, out};
  gemv_jobs(&job, 1, x, n);
}

void GpuBackend::matmul_group(const std::vector<MatmulJob>& jobs, View x, int n) {
  auto lock = enter();
  for (size_t i = 0; i < jobs.size(); i += GEMV_MAX_JOBS)
    gemv_jobs(jobs.data() + i, std::min<size_t>(GEMV_MAX_JOBS, jobs.size() - i), x, n);
}

void GpuBackend::conv_silu(View x, View state, View weights, int n, int channels, int kernel, View out) {
  auto lock = enter();
  if (kernel < 1 || kernel > int(CONV_MAX_KERNEL)) fail("gpu backend: conv kernel of ", kernel, " taps (at most ", CONV_MAX_KERNEL, ")");
  shader::ConvParams p{u32(size_t(n), "tokens"), u32(size_t(channels), "channels"), uint32_t(kernel)};
  Call(*this, k::conv_silu::id).buf(k::conv_silu::x, x).buf(k::conv_silu::state, state).buf(k::conv_silu::w, weights)
      .buf(k::conv_silu::out, out).params(k::conv_silu::p, p).grid(ceil_div(p.channels, ELEMENTWISE_THREADS))
      .threads(ELEMENTWISE_THREADS).run();
}

void GpuBackend::deltanet(View qkv, View b, View a, View A_log, View dt_bias, View state, int n, const DeltaNetShape& s,
                          View out, const DeltaNetTrace& trace) {
  auto lock = enter();
  if (s.value_dim % 8 != 0) fail("gpu backend: DeltaNet value_dim ", s.value_dim, " (the kernel needs a multiple of 8)");
  if (trace.state_norm && s.value_dim > DELTANET_MAX_VALUE_DIM)
    fail("gpu backend: tracing the DeltaNet state norm needs value_dim <= ", DELTANET_MAX_VALUE_DIM, " (got ", s.value_dim, ")");
  if (s.key_dim % 4 != 0 || s.key_dim > int(DELTANET_MAX_KEY_DIM))
    fail("gpu backend: DeltaNet key_dim ", s.key_dim, " (the kernel needs a multiple of 4, at most ", DELTANET_MAX_KEY_DIM, ")");
  if (s.key_heads <= 0 || s.value_heads % s.key_heads != 0) fail("gpu backend: DeltaNet value heads not a multiple of key heads");
  shader::DeltaNetParams p{u32(size_t(n), "tokens"), uint32_t(s.key_heads), uint32_t(s.value_heads), uint32_t(s.key_dim),
                           uint32_t(s.value_dim), s.eps, trace.beta ? 1u : 0u, trace.decay ? 1u : 0u,
                           trace.state_norm ? 1u : 0u};
  // 8 columns of a head per threadgroup (one simdgroup); the whole head in one when its state norm is traced.
  const uint32_t columns = trace.state_norm ? p.value_dim : 8u;
  namespace d = k::deltanet;
  Call(*this, d::id).buf(d::qkv, qkv).buf(d::b, b).buf(d::a, a).buf(d::A_log, A_log).buf(d::dt_bias, dt_bias)
      .buf(d::state, state).buf(d::out, out).opt(d::trace_beta, trace.beta).opt(d::trace_decay, trace.decay)
      .opt(d::trace_norm, trace.state_norm).params(d::p, p).grid(p.value_heads, p.value_dim / columns)
      .threads(4 * columns).run();
}

void GpuBackend::gated_rms_norm(View x, View z, View weight, int rows, int dim, float eps, View out) {
  auto lock = enter();
  if (dim <= 0 || size_t(dim) > 32 * NORM_MAX_PER_THREAD)
    fail("gpu backend: gated RMSNorm over rows of ", dim, " (the kernel takes up to ", 32 * NORM_MAX_PER_THREAD, ")");
  shader::NormParams p{u32(size_t(rows), "rows"), u32(size_t(dim), "dim"), eps, 1u};
  namespace g = k::gated_rms_norm;
  Call(*this, g::id).buf(g::x, x).buf(g::z, z).buf(g::weight, weight).buf(g::out, out).params(g::p, p)
      .grid(ceil_div(p.rows, ROWS_PER_THREADGROUP)).threads(ROW_THREADS).run();
}

void GpuBackend::attention_prep(View qg, View kv, View q_norm, View k_norm, int n, int pos0, const AttentionShape& s,
                                View q, View gate) {
  auto lock = enter();
  if (s.rotary_dim % 2 != 0 || s.rotary_dim > s.head_dim) fail("gpu backend: rotary_dim ", s.rotary_dim, " for head_dim ", s.head_dim);
  shader::AttentionPrepParams p{u32(size_t(n), "tokens"), u32(size_t(pos0), "position"), uint32_t(s.heads),
                                uint32_t(s.kv_heads), uint32_t(s.head_dim), uint32_t(s.rotary_dim), s.gated ? 1u : 0u,
                                s.rope_theta, s.eps};
  namespace a = k::attention_prep;
  Call(*this, a::id).buf(a::qg, qg).buf(a::k, kv).buf(a::q_norm, q_norm).buf(a::k_norm, k_norm).buf(a::q, q)
      .opt(a::gate, s.gated ? gate : View()).params(a::p, p).grid(p.heads + p.kv_heads, p.n).threads(32).run();
}

void GpuBackend::attention(View q, View k_cache, View v_cache, int n, int pos0, const AttentionShape& s, View out,
                           View probs, View gate) {
  auto lock = enter();
  const size_t H = size_t(s.heads), D = size_t(s.head_dim);
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0) fail("gpu backend: attention heads not a multiple of KV heads");
  const size_t G = H / size_t(s.kv_heads);
  if (G > ATTN_MAX_GROUP || G * D > ATTN_MAX_QUERY_FLOATS)
    fail("gpu backend: ", G, " query heads of dim ", D, " per KV head exceed the attention kernel's threadgroup memory");
  const size_t total = size_t(pos0) + size_t(n);
  shader::AttentionParams p{};
  p.n_call = u32(size_t(n), "tokens");
  p.pos0 = u32(size_t(pos0), "position");
  p.heads = uint32_t(s.heads);
  p.kv_heads = uint32_t(s.kv_heads);
  p.head_dim = uint32_t(s.head_dim);
  p.scale = 1.0f / std::sqrt(float(s.head_dim));
  p.gated = gate ? 1u : 0u;
  const size_t chunks_all = (total + ATTN_CHUNK - 1) / ATTN_CHUNK;
  const size_t per_token = H * chunks_all * (D + 2);
  const size_t block = std::max<size_t>(1, std::min<size_t>(size_t(n), kMaxAttentionPartialFloats / per_token));
  scratch(attn_ml_, block * H * chunks_all * 2);
  scratch(attn_o_, block * H * chunks_all * D);
  scratch(attn_lse_, block * H);
  for (size_t t0 = 0; t0 < size_t(n); t0 += block) {
    p.t0 = uint32_t(t0);
    p.n = uint32_t(std::min(block, size_t(n) - t0));
    p.chunks = ceil_div(size_t(pos0) + t0 + p.n, ATTN_CHUNK);
    namespace ap = k::attention_partial;
    Call(*this, ap::id).buf(ap::q, q).buf(ap::k_cache, k_cache).buf(ap::v_cache, v_cache)
        .buf(ap::part_ml, attn_ml_.get()).buf(ap::part_o, attn_o_.get()).params(ap::p, p)
        .grid(p.chunks, p.kv_heads, p.n).threads(REDUCE_THREADS).run();
    namespace ac = k::attention_combine;
    Call(*this, ac::id).buf(ac::part_ml, attn_ml_.get()).buf(ac::part_o, attn_o_.get()).buf(ac::out, out)
        .buf(ac::lse, attn_lse_.get()).opt(ac::gate, gate).params(ac::p, p).grid(p.heads, p.n).threads(REDUCE_THREADS).run();
    if (probs) {
      namespace pr = k::attention_probs;
      Call(*this, pr::id).buf(pr::q, q).buf(pr::k_cache, k_cache).buf(pr::lse, attn_lse_.get()).buf(pr::probs, probs)
          .params(pr::p, p).grid(ceil_div(total, ATTN_CHUNK), p.heads, p.n).threads(REDUCE_THREADS).run();
    }
  }
}

void GpuBackend::argmax(View logits, int rows, int vocab, View ids) {
  auto lock = enter();
  const uint32_t parts = ceil_div(size_t(vocab), ARGMAX_PART_LEN);
  shader::ArgmaxParams p{u32(size_t(rows), "rows"), u32(size_t(vocab), "vocabulary"), parts, ARGMAX_PART_LEN};
  const size_t slots = size_t(p.n) * parts;
  scratch(argmax_parts_, 2 * slots);  // the best value of each slice, then its index
  const View part_v(argmax_parts_.get()), part_i(argmax_parts_.get(), slots);
  namespace ap = k::argmax_partial;
  Call(*this, ap::id).buf(ap::logits, logits).buf(ap::part_v, part_v).buf(ap::part_i, part_i).params(ap::p, p)
      .grid(parts, p.n).threads(REDUCE_THREADS).run();
  namespace a = k::argmax;
  Call(*this, a::id).buf(a::part_v, part_v).buf(a::part_i, part_i).buf(a::ids, ids).params(a::p, p).grid(p.n)
      .threads(REDUCE_THREADS).run();
}

void GpuBackend::route(View logits, View bias, int n, int experts, int top_k, bool renormalize, View ids, View weights,
                       View probs) {
  auto lock = enter();
  if (experts > int(ROUTER_MAX_EXPERTS) || top_k > int(ROUTER_MAX_K) || top_k > experts || top_k < 1)
    fail("gpu backend: routing ", experts, " experts top-", top_k, " (at most ", ROUTER_MAX_EXPERTS, " experts, top-",
         ROUTER_MAX_K, ")");
  shader::RouteParams p{u32(size_t(n), "tokens"), uint32_t(experts), uint32_t(top_k), renormalize ? 1u : 0u,
                        bias ? 1u : 0u, probs ? 1u : 0u};
  namespace r = k::route;
  Call(*this, r::id).buf(r::logits, logits).opt(r::bias, bias).buf(r::ids, ids).buf(r::weights, weights)
      .opt(r::probs, probs).params(r::p, p).grid(p.n).threads((uint32_t(experts) + 31) / 32 * 32).run();
}

void GpuBackend::moe_experts(const Weight& gate_w, const Weight& up_w, const Weight& down_w, View x, View ids,
                             View weights, int n, int top_k, View out, const SharedExpert& shared) {
  auto lock = enter();
  const auto& G = static_cast<const GpuWeight&>(gate_w);
  const auto& U = static_cast<const GpuWeight&>(up_w);
  const auto& D = static_cast<const GpuWeight&>(down_w);
  if (!G.experts || !U.experts || !D.experts) fail("gpu backend: moe_experts needs expert stacks");
  if (top_k > int(ROUTER_MAX_K)) fail("gpu backend: ", top_k, " experts per token (the expert kernels take ", ROUTER_MAX_K, ")");
  shader::MoeParams p{};
  p.gate = G.desc, p.up = U.desc, p.down = D.desc;
  p.n = u32(size_t(n), "tokens"), p.k = uint32_t(top_k), p.hidden = G.desc.cols, p.inter = G.desc.rows;
  p.x_vec4 = x.offset % 4 == 0 && G.desc.cols % 4 == 0 ? 1u : 0u;
  p.h_vec4 = G.desc.rows % 4 == 0 ? 1u : 0u;
  const GpuWeight *SG = nullptr, *SU = nullptr, *SD = nullptr;
  if (shared.gate) {
    SG = &static_cast<const GpuWeight&>(*shared.gate);
    SU = &static_cast<const GpuWeight&>(*shared.up);
    SD = &static_cast<const GpuWeight&>(*shared.down);
    p.sgate = SG->desc, p.sup = SU->desc, p.sdown = SD->desc;
    p.shared = 1u, p.shared_inter = SG->desc.rows, p.shared_scale = shared.scale;
    p.sh_vec4 = SG->desc.rows % 4 == 0 ? 1u : 0u;
  }
  scratch(moe_h_, size_t(n) * size_t(top_k) * p.inter);
  scratch(moe_shared_h_, std::max<size_t>(1, size_t(n) * p.shared_inter));
  auto data = [](const GpuWeight* w) { return w ? w->data.get() : nullptr; };
  auto scales = [](const GpuWeight* w) { return w ? w->scales.get() : nullptr; };
  auto biases = [](const GpuWeight* w) { return w ? w->biases.get() : nullptr; };
  namespace gu = k::moe_gate_up;
  Call(*this, gu::id).buf(gu::gw, G.data.get()).buf(gu::gs, G.scales.get()).buf(gu::gb, G.biases.get())
      .buf(gu::uw, U.data.get()).buf(gu::us, U.scales.get()).buf(gu::ub, U.biases.get()).buf(gu::x, x)
      .buf(gu::ids, ids).buf(gu::h, moe_h_.get()).buf(gu::sgw, data(SG)).buf(gu::sgs, scales(SG))
      .buf(gu::sgb, biases(SG)).buf(gu::suw, data(SU)).buf(gu::sus, scales(SU)).buf(gu::sub, biases(SU))
      .buf(gu::sh, moe_shared_h_.get()).params(gu::p, p)
      .grid(ceil_div(std::max(p.inter, p.shared_inter), GEMV_ROWS * GEMV_SIMDGROUPS / 2), p.k + p.shared, p.n)
      .threads(GEMV_THREADS).run();
  // moe_down reads the k experts' rows as one virtual row.
  p.split = split_k(ceil_div(p.hidden, GEMV_ROWS), p.n, size_t(D.desc.row_bytes / 4) * size_t(top_k), MOE_DOWN_UNROLL);
  namespace dn = k::moe_down;
  Call(*this, dn::id).buf(dn::dw, D.data.get()).buf(dn::ds, D.scales.get()).buf(dn::db, D.biases.get())
      .buf(dn::h, moe_h_.get()).buf(dn::ids, ids).buf(dn::weights, weights).buf(dn::out, out)
      .buf(dn::sdw, data(SD)).buf(dn::sds, scales(SD)).buf(dn::sdb, biases(SD)).buf(dn::sh, moe_shared_h_.get())
      .opt(dn::gate_logit, shared.gate ? shared.gate_logit : View()).params(dn::p, p)
      .grid(ceil_div(p.hidden, GEMV_ROWS * GEMV_SIMDGROUPS / p.split), p.n).threads(GEMV_THREADS).run();
}

}  // namespace moelens::gpu
