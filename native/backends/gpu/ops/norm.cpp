// RMSNorm (fused with a deferred residual add when the add is of the same rows, or deferred itself into
// the GEMV that reads its output: gemv_norm) and the gated RMSNorm.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

void GpuBackend::rms_norm(View x, View weight, int rows, int dim, float eps, View out) {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  const uint32_t threads = norm_threads(dim);
  flush_held();
  flush_norm();
  flush_route();
  if (add_.active && add_.a.buf == x.buf && add_.a.offset == x.offset && add_.count == size_t(rows) * size_t(dim)) {
    add_.active = false;
    shader::AddNormParams p{u32(size_t(rows), "rows"), u32(size_t(dim), "dim"), eps, weight ? 1u : 0u, add_.scale};
    namespace an = k::add_rms_norm;
    Call(*this, an::id).buf(an::h, x).buf(an::a, add_.b).opt(an::weight, weight).buf(an::out, out).params(an::p, p)
        .grid(p.rows).threads(threads).run();
    return;
  }
  flush_add();
  u32(size_t(rows), "rows");
  // Deferred where a GEMV could take it (not in place: that GEMV reads x while writing out).
  norm_ = {x, weight, out, View(), rows, dim, eps, true};
  if (size_t(dim) > GEMV_NORM_MAX_COLS || out.buf == x.buf) flush_norm();
}

void GpuBackend::flush_norm() {
  if (!norm_.active) return;
  norm_.active = false;
  const PendingNorm& n = norm_;
  shader::NormParams p{uint32_t(n.rows), uint32_t(n.dim), n.eps, n.weight ? 1u : 0u};
  if (n.gate) {
    namespace g = k::gated_rms_norm;
    Call(*this, g::id).buf(g::x, n.x).buf(g::z, n.gate).buf(g::weight, n.weight).buf(g::out, n.out).params(g::p, p)
        .grid(ceil_div(p.rows, ROWS_PER_THREADGROUP)).threads(ROW_THREADS).run();
    return;
  }
  Call(*this, k::rms_norm::id).buf(k::rms_norm::x, n.x).opt(k::rms_norm::weight, n.weight).buf(k::rms_norm::out, n.out)
      .params(k::rms_norm::p, p).grid(p.rows).threads(norm_threads(n.dim)).run();
}

void GpuBackend::gated_rms_norm(View x, View z, View weight, int rows, int dim, float eps, View out) {
  auto lock = enter();
  if (dim <= 0 || size_t(dim) > 32 * NORM_MAX_PER_THREAD)
    fail("gpu backend: gated RMSNorm over rows of ", dim, " (the kernel takes up to ", 32 * NORM_MAX_PER_THREAD, ")");
  u32(size_t(rows), "rows");
  // Deferred as rms_norm: the output projection may take it (not in place, nor writing its gate).
  norm_ = {x, weight, out, z, rows, dim, eps, true};
  if (out.buf == x.buf || out.buf == z.buf) flush_norm();
}

}  // namespace moelens::gpu
