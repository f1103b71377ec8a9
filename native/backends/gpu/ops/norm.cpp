// RMSNorm (fused with a deferred residual add when the add is of the same rows) and the gated RMSNorm.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

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

void GpuBackend::gated_rms_norm(View x, View z, View weight, int rows, int dim, float eps, View out) {
  auto lock = enter();
  if (dim <= 0 || size_t(dim) > 32 * NORM_MAX_PER_THREAD)
    fail("gpu backend: gated RMSNorm over rows of ", dim, " (the kernel takes up to ", 32 * NORM_MAX_PER_THREAD, ")");
  shader::NormParams p{u32(size_t(rows), "rows"), u32(size_t(dim), "dim"), eps, 1u};
  namespace g = k::gated_rms_norm;
  Call(*this, g::id).buf(g::x, x).buf(g::z, z).buf(g::weight, weight).buf(g::out, out).params(g::p, p)
      .grid(ceil_div(p.rows, ROWS_PER_THREADGROUP)).threads(ROW_THREADS).run();
}

}  // namespace moelens::gpu
