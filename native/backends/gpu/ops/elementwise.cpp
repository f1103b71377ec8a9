// Elementwise ops: the embedding lookup, the residual add (deferred: see rms_norm) and scaling.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

void GpuBackend::embed(const Weight& table, View ids, int n, View out) {
  auto lock = enter();
  const auto& w = static_cast<const GpuWeight&>(table);
  shader::EmbedParams p{w.desc, u32(size_t(n), "tokens")};
  Call(*this, k::embed::id).buf(k::embed::data, w.data.get()).buf(k::embed::scales, w.scales.get())
      .buf(k::embed::biases, w.biases.get()).buf(k::embed::ids, ids).buf(k::embed::out, out).params(k::embed::p, p)
      .grid(ceil_div(w.desc.cols, ELEMENTWISE_THREADS), p.n).threads(ELEMENTWISE_THREADS).run();
}

static_assert(k::gemv::residual == k::gemv_norm::residual && k::gemv::p == k::gemv_norm::p,
              "gemv, gemv_norm: the residual and the parameters at the same indices");

void GpuBackend::add(View a, View b, size_t count, float s) {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  // The add of a held launch's whole output: that launch adds it (unless it reads a's buffer).
  if (held_.active && held_.out.buf == b.buf && held_.out.offset == b.offset && held_.count == count) {
    Dispatch& d = held_.d;
    DeviceBuffer* target = static_cast<GpuBuffer*>(a.buf)->device();
    bool reads_target = false;
    for (const Binding& bound : d.buffers) reads_target = reads_target || bound.buffer == target;
    const bool gemv = d.kernel == int(k::gemv::id) || d.kernel == int(k::gemv_norm::id);
    if (!reads_target && (gemv || d.kernel == int(k::moe_down::id))) {
      const int slot = gemv ? k::gemv::residual : k::moe_down::residual;
      d.buffers[slot] = {target, a.offset * 4};
      if (gemv) {
        auto* p = reinterpret_cast<shader::GemvParams*>(d.params);
        p->residual = 1u, p->residual_scale = s;
      } else {
        auto* p = reinterpret_cast<shader::MoeParams*>(d.params);
        p->residual = 1u, p->residual_scale = s;
      }
      flush_held();
      return;
    }
  }
  flush_deferred();
  add_ = {a, b, count, s, true};
}

void GpuBackend::scale(View x, float s, size_t count) {
  auto lock = enter();
  shader::ElementwiseParams p{u32(count, "scale size"), s, 0u};
  Call(*this, k::scale_values::id).buf(k::scale_values::x, x).params(k::scale_values::p, p)
      .grid(ceil_div(count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
}

}  // namespace moelens::gpu
