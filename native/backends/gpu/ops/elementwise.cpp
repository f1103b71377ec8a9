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

void GpuBackend::add(View a, View b, size_t count, float s) {
  auto lock = enter();
  add_ = {a, b, count, s, true};
}

void GpuBackend::scale(View x, float s, size_t count) {
  auto lock = enter();
  shader::ElementwiseParams p{u32(count, "scale size"), s, 0u};
  Call(*this, k::scale_values::id).buf(k::scale_values::x, x).params(k::scale_values::p, p)
      .grid(ceil_div(count, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
}

}  // namespace moelens::gpu
