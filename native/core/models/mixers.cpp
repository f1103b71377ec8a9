#include "mixers.h"

namespace moelens {

std::unique_ptr<Buffer> MixerScratch::alloc(Backend& be, int rows, int width) {
  return be.alloc(ElemType::F32, size_t(rows) * size_t(width));
}

MixerScratch::MixerScratch(Backend& be, const ModelConfig& c, int rows) : m(rows) {
  const int attn_width = c.num_heads * c.head_dim;
  mix = alloc(be, m, c.hidden_size);
  qkv = alloc(be, m, c.conv_dim());
  qkv_conv = alloc(be, m, c.conv_dim());
  z = alloc(be, m, c.value_dim());
  b = alloc(be, m, c.linear_value_heads);
  a = alloc(be, m, c.linear_value_heads);
  core = alloc(be, m, c.value_dim());
  qg = alloc(be, m, attn_width * (c.attn_output_gate ? 2 : 1));
  q = alloc(be, m, attn_width);
  k = alloc(be, m, c.num_kv_heads * c.head_dim);
  v = alloc(be, m, c.num_kv_heads * c.head_dim);
  gate = alloc(be, m, attn_width);
  attn = alloc(be, m, attn_width);
}

size_t MixerScratch::elements() const {
  size_t n = 0;
  for (const auto* b : {&mix, &qkv, &qkv_conv, &z, &this->b, &a, &core, &qg, &q, &k, &v, &gate, &attn}) n += (*b)->count();
  return n;
}

void run_deltanet(const LayerStep& step, MixerScratch& s, LayerState& state, const LayerResources& W, int l) {
  const ModelConfig& c = step.model.config();
  Backend& be = step.be;
  HookRun& hooks = step.hooks;
  const int m = step.m, Hv = c.linear_value_heads, conv_dim = c.conv_dim();
  const DeltaNetShape dn{c.linear_key_heads, c.linear_value_heads, c.linear_key_dim, c.linear_value_dim, 1e-6f};
  be.matmul_group({{W.in_qkv.get(), s.qkv}, {W.in_z.get(), s.z}, {W.in_b.get(), s.b}, {W.in_a.get(), s.a}}, step.x, m);
  be.conv_silu(s.qkv, state.conv, W.conv, m, conv_dim, c.conv_kernel, s.qkv_conv);
  hooks.tap(HookId::DeltaNetConvOut, l, s.qkv_conv);
  hooks.tap(HookId::DeltaNetQ, l, View(s.qkv_conv), conv_dim);
  hooks.tap(HookId::DeltaNetK, l, View(s.qkv_conv, size_t(c.key_dim())), conv_dim);
  hooks.tap(HookId::DeltaNetV, l, View(s.qkv_conv, size_t(2 * c.key_dim())), conv_dim);
  const DeltaNetTrace trace{hooks.sink(HookId::DeltaNetBeta, l), hooks.sink(HookId::DeltaNetDecay, l),
                            hooks.sink(HookId::DeltaNetStateNorm, l)};
  be.deltanet(s.qkv_conv, s.b, s.a, W.A_log, W.dt_bias, state.recurrent, m, dn, s.core, trace);
  be.gated_rms_norm(s.core, s.z, W.norm, m * Hv, c.linear_value_dim, c.rms_norm_eps, s.core);
  hooks.tap(HookId::DeltaNetHeadOut, l, s.core);
  be.matmul(*W.out, s.core, m, s.mix);
  hooks.tap(HookId::DeltaNetOut, l, s.mix);
}

void run_attention(const LayerStep& step, MixerScratch& s, LayerState& state, const LayerResources& W, int l) {
  const ModelConfig& c = step.model.config();
  Backend& be = step.be;
  HookRun& hooks = step.hooks;
  const int m = step.m, pos = step.pos;
  const AttentionShape as = attention_shape(c);
  const size_t kv_width = size_t(c.num_kv_heads) * c.head_dim;
  // k (normed and rotated in place) and v go into the cache rows of these tokens, in the cache's type:
  // by attention_prep, or once the hook points have seen (and maybe edited) them.
  const View k_rows(state.k_cache, size_t(pos) * kv_width), v_rows(state.v_cache, size_t(pos) * kv_width);
  const bool kv_hooks = hooks.active(HookId::AttnK, l) || hooks.active(HookId::AttnV, l);
  be.matmul_group({{W.q.get(), s.qg}, {W.k.get(), s.k}, {W.v.get(), s.v}}, step.x, m);
  be.attention_prep(s.qg, s.k, s.v, W.q_norm, W.k_norm, m, pos, as, s.q, s.gate, kv_hooks ? View() : k_rows,
                    kv_hooks ? View() : v_rows);
  hooks.tap(HookId::AttnQ, l, s.q);
  if (kv_hooks) {
    hooks.tap(HookId::AttnK, l, s.k);
    hooks.tap(HookId::AttnV, l, s.v);
    be.copy(k_rows, s.k, size_t(m) * kv_width);
    be.copy(v_rows, s.v, size_t(m) * kv_width);
  }
  if (c.attn_output_gate) hooks.tap(HookId::AttnGate, l, s.gate);
  be.attention(s.q, state.k_cache, state.v_cache, m, pos, as, s.attn, hooks.sink(HookId::AttnProbs, l),
               c.attn_output_gate ? View(s.gate) : View());
  hooks.tap(HookId::AttnHeadOut, l, s.attn);
  be.matmul(*W.o, s.attn, m, s.mix);
  hooks.tap(HookId::AttnOut, l, s.mix);
}

}  // namespace moelens
