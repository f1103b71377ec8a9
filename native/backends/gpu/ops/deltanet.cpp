// Gated DeltaNet: the causal conv with SiLU and the gated delta rule.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

void GpuBackend::conv_silu(View x, View state, View weights, int n, int channels, int kernel, View out) {
  auto lock = enter();
  if (kernel < 1 || kernel > int(CONV_MAX_KERNEL)) fail("gpu backend: conv kernel of ", kernel, " taps (at most ", CONV_MAX_KERNEL, ")");
  shader::ConvParams p{u32(size_t(n), "tokens"), u32(size_t(channels), "channels"), uint32_t(kernel)};
  if (tiled(n)) {  // token-parallel, then the state once every token has read it
    Call(*this, k::conv_silu_tokens::id).buf(k::conv_silu_tokens::x, x).buf(k::conv_silu_tokens::state, state)
        .buf(k::conv_silu_tokens::w, weights).buf(k::conv_silu_tokens::out, out).params(k::conv_silu_tokens::p, p)
        .grid(ceil_div(p.channels, ELEMENTWISE_THREADS), ceil_div(p.n, CONV_TOKENS)).threads(ELEMENTWISE_THREADS).run();
    Call(*this, k::conv_state_update::id).buf(k::conv_state_update::x, x).buf(k::conv_state_update::state, state)
        .params(k::conv_state_update::p, p).grid(ceil_div(p.channels, ELEMENTWISE_THREADS)).threads(ELEMENTWISE_THREADS).run();
    return;
  }
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
  // A prompt stages its tokens in blocks (deltanet_tokens) unless the state norm is traced, which sums over a
  // whole head in one threadgroup.
  if (n > 1 && !trace.state_norm) {
    // What does not depend on the state, for every token at once, then the recurrence over it.
    scratch(deltanet_qk_, size_t(n) * p.key_heads * 2 * DELTANET_MAX_KEY_DIM);
    scratch(deltanet_gates_, size_t(n) * p.value_heads * 4);
    namespace dp = k::deltanet_prep;
    Call(*this, dp::id).buf(dp::qkv, qkv).buf(dp::b, b).buf(dp::a, a).buf(dp::A_log, A_log).buf(dp::dt_bias, dt_bias)
        .buf(dp::qk, deltanet_qk_.get()).buf(dp::gates, deltanet_gates_.get()).opt(dp::trace_beta, trace.beta)
        .opt(dp::trace_decay, trace.decay).params(dp::p, p)
        .grid(ceil_div(p.n * p.key_heads, DELTANET_TOKENS_SIMDGROUPS)).threads(DELTANET_TOKENS_THREADS).run();
    namespace dt = k::deltanet_tokens;
    Call(*this, dt::id).buf(dt::qkv, qkv).buf(dt::qk, deltanet_qk_.get()).buf(dt::gates, deltanet_gates_.get())
        .buf(dt::state, state).buf(dt::out, out).params(dt::p, p)
        .grid(p.value_heads, ceil_div(p.value_dim, DELTANET_TOKENS_COLUMNS)).threads(DELTANET_TOKENS_THREADS).run();
    return;
  }
  // 8 columns of a head per threadgroup (one simdgroup); the whole head in one when its state norm is traced.
  const uint32_t columns = trace.state_norm ? p.value_dim : 8u;
  namespace d = k::deltanet;
  Call(*this, d::id).buf(d::qkv, qkv).buf(d::b, b).buf(d::a, a).buf(d::A_log, A_log).buf(d::dt_bias, dt_bias)
      .buf(d::state, state).buf(d::out, out).opt(d::trace_beta, trace.beta).opt(d::trace_decay, trace.decay)
      .opt(d::trace_norm, trace.state_norm).params(d::p, p).grid(p.value_heads, p.value_dim / columns)
      .threads(4 * columns).run();
}

}  // namespace moelens::gpu
