// RMSNorm (fused with a deferred residual add when the add is of the same rows) and the gated RMSNorm.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

void GpuBackend::rms_norm(View x, View weight, int rows, int dim, float eps, View out) {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  const size_t count = size_t(rows) * size_t(dim);
  // First, since growing the blocks' buffer releases the old one, and a release dispatches a deferred add.
  View xq, de;
  const bool int16 = writes_int16_form(count, dim, xq, de);
  const bool fused = add_.active && add_.a.buf == x.buf && add_.a.offset == x.offset && add_.count == count;
  if (!fused) flush_add();
  if (fused) {
    add_.active = false;
    shader::AddNormParams p{u32(size_t(rows), "rows"), u32(size_t(dim), "dim"), eps, weight ? 1u : 0u, add_.scale, int16 ? 1u : 0u};
    namespace an = k::add_rms_norm;
    Call(*this, an::id).buf(an::h, x).buf(an::a, add_.b).opt(an::weight, weight).buf(an::out, out).opt(an::xq, xq)
        .opt(an::de, de).params(an::p, p).grid(p.rows).threads(norm_threads(dim)).run();
  } else {
    shader::NormParams p{u32(size_t(rows), "rows"), u32(size_t(dim), "dim"), eps, weight ? 1u : 0u, int16 ? 1u : 0u};
    namespace rn = k::rms_norm;
    Call(*this, rn::id).buf(rn::x, x).opt(rn::weight, weight).buf(rn::out, out).opt(rn::xq, xq).opt(rn::de, de)
        .params(rn::p, p).grid(p.rows).threads(norm_threads(dim)).run();
  }
  if (int16) int16_form_ = {out, count, true};
}

void GpuBackend::gated_rms_norm(View x, View z, View weight, int rows, int dim, float eps, View out) {
  auto lock = enter();
  if (dim <= 0 || size_t(dim) > 32 * NORM_MAX_PER_THREAD)
    fail("gpu backend: gated RMSNorm over rows of ", dim, " (the kernel takes up to ", 32 * NORM_MAX_PER_THREAD, ")");
  const size_t count = size_t(rows) * size_t(dim);
  View xq, de;
  const bool int16 = writes_int16_form(count, dim, xq, de);
  shader::NormParams p{u32(size_t(rows), "rows"), u32(size_t(dim), "dim"), eps, 1u, int16 ? 1u : 0u};
  namespace g = k::gated_rms_norm;
  Call(*this, g::id).buf(g::x, x).buf(g::z, z).buf(g::weight, weight).buf(g::out, out).opt(g::xq, xq).opt(g::de, de)
      .params(g::p, p).grid(ceil_div(p.rows, ROWS_PER_THREADGROUP)).threads(ROW_THREADS).run();
  if (int16) int16_form_ = {out, count, true};
}

}  // namespace moelens::gpu
