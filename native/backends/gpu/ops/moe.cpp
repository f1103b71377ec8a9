// Mixture of experts: routing (softmax, top-k, bias edits) and the routed plus shared experts.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

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
