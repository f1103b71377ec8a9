#include "session.h"

#include <algorithm>
#include <cstring>

#include "error.h"

namespace moelens {

// Activations for up to `rows` tokens, reused across calls.
struct Session::Scratch {
  int rows = 0;
  std::unique_ptr<Buffer> ids, h, x, mix, qkv, qkv_conv, z, b, a, core, qg, q, gate, k, v, attn, router_logits,
      route_ids, route_weights, routed, shared_g, shared_u, shared_out, shared_gate, logits;
  // trace buffers [layers, rows, ...]
  std::unique_ptr<Buffer> t_router_logits, t_router_ids, t_router_weights, t_residual;
};

Session::Session(const Model& model) : model_(model), be_(model.backend()) {
  const ModelConfig& c = model_.config();
  layers_.resize(size_t(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    if (c.layer_kinds[size_t(i)] != LayerKind::DeltaNet) continue;
    layers_[size_t(i)].conv = be_.alloc(ElemType::F32, size_t(c.conv_kernel - 1) * c.conv_dim());
    layers_[size_t(i)].recurrent =
        be_.alloc(ElemType::F32, size_t(c.linear_value_heads) * c.linear_key_dim * c.linear_value_dim);
  }
}

Session::~Session() = default;

void Session::reset() {
  for (auto& L : layers_) {
    if (L.conv) be_.fill(L.conv, 0.f, L.conv->count());
    if (L.recurrent) be_.fill(L.recurrent, 0.f, L.recurrent->count());
  }
  pos_ = 0;
}

std::unique_ptr<Session> Session::fork() const {
  auto s = std::make_unique<Session>(model_);
  s->pos_ = pos_;
  s->kv_capacity_ = kv_capacity_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerState& src = layers_[i];
    LayerState& dst = s->layers_[i];
    if (src.conv) be_.copy(dst.conv, src.conv, src.conv->count());
    if (src.recurrent) be_.copy(dst.recurrent, src.recurrent, src.recurrent->count());
    if (src.k_cache) {
      dst.k_cache = be_.alloc(ElemType::F32, src.k_cache->count());
      dst.v_cache = be_.alloc(ElemType::F32, src.v_cache->count());
      be_.copy(dst.k_cache, src.k_cache, src.k_cache->count());
      be_.copy(dst.v_cache, src.v_cache, src.v_cache->count());
    }
  }
  return s;
}

void Session::ensure_kv_capacity(int tokens) {
  if (tokens <= kv_capacity_) return;
  const ModelConfig& c = model_.config();
  int cap = std::max(256, kv_capacity_);
  while (cap < tokens) cap *= 2;
  cap = std::min(cap, c.max_position_embeddings);
  const size_t width = size_t(c.num_kv_heads) * c.head_dim;
  for (int i = 0; i < c.num_layers; ++i) {
    if (c.layer_kinds[size_t(i)] != LayerKind::Attention) continue;
    LayerState& L = layers_[size_t(i)];
    auto k = be_.alloc(ElemType::F32, size_t(cap) * width);
    auto v = be_.alloc(ElemType::F32, size_t(cap) * width);
    if (L.k_cache) {
      be_.copy(k, L.k_cache, size_t(pos_) * width);
      be_.copy(v, L.v_cache, size_t(pos_) * width);
    }
    L.k_cache = std::move(k);
    L.v_cache = std::move(v);
  }
  kv_capacity_ = cap;
}

Session::Scratch& Session::scratch(int m) {
  if (scratch_ && scratch_->rows >= m) return *scratch_;
  const ModelConfig& c = model_.config();
  auto s = std::make_unique<Scratch>();
  s->rows = m;
  auto f = [&](size_t per_row) { return be_.alloc(ElemType::F32, size_t(m) * per_row); };
  const size_t H = size_t(c.hidden_size);
  const size_t attn_width = size_t(c.num_heads) * c.head_dim;
  s->ids = be_.alloc(ElemType::I32, size_t(m));
  s->h = f(H);
  s->x = f(H);
  s->mix = f(H);
  s->qkv = f(size_t(c.conv_dim()));
  s->qkv_conv = f(size_t(c.conv_dim()));
  s->z = f(size_t(c.value_dim()));
  s->b = f(size_t(c.linear_value_heads));
  s->a = f(size_t(c.linear_value_heads));
  s->core = f(size_t(c.value_dim()));
  s->qg = f(attn_width * (c.attn_output_gate ? 2 : 1));
  s->q = f(attn_width);
  s->gate = f(attn_width);
  s->k = f(size_t(c.num_kv_heads) * c.head_dim);
  s->v = f(size_t(c.num_kv_heads) * c.head_dim);
  s->attn = f(attn_width);
  s->router_logits = f(size_t(c.num_experts));
  s->route_ids = be_.alloc(ElemType::I32, size_t(m) * c.experts_per_token);
  s->route_weights = f(size_t(c.experts_per_token));
  s->routed = f(H);
  s->shared_g = f(size_t(c.shared_intermediate));
  s->shared_u = f(size_t(c.shared_intermediate));
  s->shared_out = f(H);
  s->shared_gate = f(1);
  scratch_ = std::move(s);
  return *scratch_;
}

ForwardResult Session::forward(const int32_t* ids, int n, const ForwardOptions& options) {
  const ModelConfig& c = model_.config();
  if (n <= 0) fail("forward: no tokens given");
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      fail("token id ", ids[i], " at index ", i, " is outside the vocabulary [0, ", c.vocab_size, ")");
  if (int64_t(pos_) + n > c.max_position_embeddings)
    fail("context overflow: ", pos_, " + ", n, " tokens exceeds max_position_embeddings (", c.max_position_embeddings, ")");
  ForwardResult r;
  r.n = n;
  const size_t L = size_t(c.num_layers);
  if (options.capture.router) {
    r.router_logits.resize(L * n * c.num_experts);
    r.router_ids.resize(L * n * c.experts_per_token);
    r.router_weights.resize(L * n * c.experts_per_token);
  }
  if (options.capture.residual) r.residual.resize(L * n * c.hidden_size);
  r.logits_rows = options.logits == LogitsMode::All ? n : options.logits == LogitsMode::Last ? 1 : 0;
  r.logits.resize(size_t(r.logits_rows) * c.vocab_size);
  for (int off = 0; off < n; off += kChunk) forward_chunk(ids + off, std::min(kChunk, n - off), off, n, options, r);
  return r;
}

void Session::forward_chunk(const int32_t* ids, int m, int offset, int total, const ForwardOptions& opt,
                            ForwardResult& r) {
  const ModelConfig& c = model_.config();
  Scratch& s = scratch(m);
  const int H = c.hidden_size, E = c.num_experts, K = c.experts_per_token, NL = c.num_layers;
  const bool last_chunk = offset + m == total;
  ensure_kv_capacity(pos_ + m);

  // Trace buffers for this chunk: [layers, m, width].
  auto trace_buf = [&](std::unique_ptr<Buffer>& b, ElemType t, size_t width) {
    if (!b || b->count() < size_t(NL) * m * width) b = be_.alloc(t, size_t(NL) * m * width);
  };
  if (opt.capture.router) {
    trace_buf(s.t_router_logits, ElemType::F32, size_t(E));
    trace_buf(s.t_router_ids, ElemType::I32, size_t(K));
    trace_buf(s.t_router_weights, ElemType::F32, size_t(K));
  }
  if (opt.capture.residual) trace_buf(s.t_residual, ElemType::F32, size_t(H));

  be_.write(s.ids, ids, size_t(m));
  be_.embed(model_.embed(), s.ids, m, s.h);

  const DeltaNetShape dn{c.linear_key_heads, c.linear_value_heads, c.linear_key_dim, c.linear_value_dim, 1e-6f};
  const AttentionShape as{c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim, c.attn_output_gate,
                          float(c.rope_theta), c.rms_norm_eps};
  const size_t kv_width = size_t(c.num_kv_heads) * c.head_dim;

  for (int l = 0; l < NL; ++l) {
    if (opt.cancel && opt.cancel->load()) fail("cancelled");
    const LayerResources& W = model_.layer(l);
    LayerState& st = layers_[size_t(l)];
    be_.rms_norm(s.h, W.input_norm, m, H, c.rms_norm_eps, s.x);
    if (c.layer_kinds[size_t(l)] == LayerKind::DeltaNet) {
      be_.matmul(*W.in_qkv, s.x, m, s.qkv);
      be_.matmul(*W.in_z, s.x, m, s.z);
      be_.matmul(*W.in_b, s.x, m, s.b);
      be_.matmul(*W.in_a, s.x, m, s.a);
      be_.conv_silu(s.qkv, st.conv, W.conv, m, c.conv_dim(), c.conv_kernel, s.qkv_conv);
      be_.deltanet(s.qkv_conv, s.b, s.a, W.A_log, W.dt_bias, st.recurrent, m, dn, s.core, {});
      be_.gated_rms_norm(s.core, s.z, W.norm, m * c.linear_value_heads, c.linear_value_dim, c.rms_norm_eps, s.core);
      be_.matmul(*W.out, s.core, m, s.mix);
    } else {
      be_.matmul(*W.q, s.x, m, s.qg);
      be_.matmul(*W.k, s.x, m, s.k);
      be_.matmul(*W.v, s.x, m, s.v);
      be_.attention_prep(s.qg, s.k, W.q_norm, W.k_norm, m, pos_, as, s.q, s.gate);
      be_.copy(View(st.k_cache, size_t(pos_) * kv_width), s.k, size_t(m) * kv_width);
      be_.copy(View(st.v_cache, size_t(pos_) * kv_width), s.v, size_t(m) * kv_width);
      be_.attention(s.q, st.k_cache, st.v_cache, m, pos_, as, s.attn, {});
      if (c.attn_output_gate) be_.sigmoid_mul(s.attn, s.gate, size_t(m) * c.num_heads * c.head_dim);
      be_.matmul(*W.o, s.attn, m, s.mix);
    }
    be_.add(s.h, s.mix, size_t(m) * H);

    // Mixture of experts with the gated shared expert.
    be_.rms_norm(s.h, W.post_norm, m, H, c.rms_norm_eps, s.x);
    be_.matmul(*W.router, s.x, m, s.router_logits);
    be_.route(s.router_logits, {}, m, E, K, c.norm_topk_prob, s.route_ids, s.route_weights, {});
    be_.moe_experts(*W.gate, *W.up, *W.down, s.x, s.route_ids, s.route_weights, m, K, s.routed);
    be_.matmul(*W.shared_gate, s.x, m, s.shared_g);
    be_.matmul(*W.shared_up, s.x, m, s.shared_u);
    be_.swiglu(s.shared_g, s.shared_u, size_t(m) * c.shared_intermediate, s.shared_g);
    be_.matmul(*W.shared_down, s.shared_g, m, s.shared_out);
    be_.matmul(*W.shared_expert_gate, s.x, m, s.shared_gate);
    be_.add_gated(s.routed, s.shared_out, s.shared_gate, m, H, 1.0f);
    be_.add(s.h, s.routed, size_t(m) * H);

    if (opt.capture.router) {
      be_.copy(View(s.t_router_logits, size_t(l) * m * E), s.router_logits, size_t(m) * E);
      be_.copy(View(s.t_router_ids, size_t(l) * m * K), s.route_ids, size_t(m) * K);
      be_.copy(View(s.t_router_weights, size_t(l) * m * K), s.route_weights, size_t(m) * K);
    }
    if (opt.capture.residual) be_.copy(View(s.t_residual, size_t(l) * m * H), s.h, size_t(m) * H);
  }

  // Logits: every row, or the last row of the last chunk.
  const int V = c.vocab_size;
  int rows = 0, first = 0, out_row = 0;
  if (opt.logits == LogitsMode::All) rows = m, first = 0, out_row = offset;
  else if (opt.logits == LogitsMode::Last && last_chunk) rows = 1, first = m - 1, out_row = 0;
  if (rows) {
    if (!s.logits || s.logits->count() < size_t(rows) * V) s.logits = be_.alloc(ElemType::F32, size_t(rows) * V);
    be_.rms_norm(View(s.h, size_t(first) * H), model_.final_norm(), rows, H, c.rms_norm_eps, s.x);
    be_.matmul(model_.lm_head(), s.x, rows, s.logits);
  }
  be_.synchronize();
  if (rows) be_.read(s.logits, r.logits.data() + size_t(out_row) * V, size_t(rows) * V);

  // Read the traces back into [layers, total, width] at this chunk's offset.
  auto read_trace = [&](const std::unique_ptr<Buffer>& b, void* dst, size_t width) {
    for (int l = 0; l < NL; ++l)
      be_.read(View(b, size_t(l) * m * width),
               static_cast<char*>(dst) + (size_t(l) * total + offset) * width * 4, size_t(m) * width);
  };
  if (opt.capture.router) {
    read_trace(s.t_router_logits, r.router_logits.data(), size_t(E));
    read_trace(s.t_router_ids, r.router_ids.data(), size_t(K));
    read_trace(s.t_router_weights, r.router_weights.data(), size_t(K));
  }
  if (opt.capture.residual) read_trace(s.t_residual, r.residual.data(), size_t(H));
  pos_ += m;
}

}  // namespace moelens
