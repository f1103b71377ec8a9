#include "session.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "error.h"

namespace moelens {

// Activations for up to `rows` tokens, reused across calls.
struct Session::Scratch {
  int rows = 0;
  std::unique_ptr<Buffer> ids, h, x, mix, qkv, qkv_conv, z, b, a, core, qg, q, gate, attn, router_logits,
      router_bias, route_ids, route_weights, routed, shared_gate, logits;
  // trace buffers [layers, rows, ...], grown on demand
  std::unique_ptr<Buffer> t_router_logits, t_router_probs, t_router_ids, t_router_weights, t_shared_gate, t_residual,
      t_residual_mid, t_dn_beta, t_dn_decay, t_dn_norm, t_attn_gate, attn_probs;
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

size_t Session::memory_bytes() const {
  size_t elems = 0;
  auto add = [&](const std::unique_ptr<Buffer>& b) { elems += b ? b->count() : 0; };
  for (const LayerState& L : layers_) {
    add(L.conv);
    add(L.recurrent);
    add(L.k_cache);
    add(L.v_cache);
  }
  if (scratch_) {
    const Scratch& s = *scratch_;
    for (const auto* b : {&s.ids, &s.h, &s.x, &s.mix, &s.qkv, &s.qkv_conv, &s.z, &s.b, &s.a, &s.core, &s.qg, &s.q, &s.gate,
                          &s.attn, &s.router_logits, &s.router_bias, &s.route_ids, &s.route_weights, &s.routed,
                          &s.shared_gate, &s.logits, &s.t_router_logits,
                          &s.t_router_probs, &s.t_router_ids, &s.t_router_weights, &s.t_shared_gate, &s.t_residual,
                          &s.t_residual_mid, &s.t_dn_beta, &s.t_dn_decay, &s.t_dn_norm, &s.t_attn_gate, &s.attn_probs})
      add(*b);
  }
  return elems * 4;
}

void Session::deltanet_state(int layer, std::vector<float>* recurrent, std::vector<float>* conv) const {
  const ModelConfig& c = model_.config();
  if (layer < 0 || layer >= c.num_layers || c.layer_kinds[size_t(layer)] != LayerKind::DeltaNet)
    fail("layer ", layer, " is not a DeltaNet layer");
  const LayerState& L = layers_[size_t(layer)];
  recurrent->resize(L.recurrent->count());
  conv->resize(L.conv->count());
  be_.read(L.recurrent, recurrent->data(), recurrent->size());
  be_.read(L.conv, conv->data(), conv->size());
}

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
  s->attn = f(attn_width);
  s->router_logits = f(size_t(c.num_experts));
  s->router_bias = f(size_t(c.num_experts));
  s->route_ids = be_.alloc(ElemType::I32, size_t(m) * c.experts_per_token);
  s->route_weights = f(size_t(c.experts_per_token));
  s->routed = f(H);
  s->shared_gate = f(1);
  scratch_ = std::move(s);
  return *scratch_;
}

namespace {

bool covers(const std::vector<int>& positions, int pos) {
  return positions.empty() || std::find(positions.begin(), positions.end(), pos) != positions.end();
}

bool applies(const Intervention& iv, int layer) { return iv.layer == -1 || iv.layer == layer; }

const char* kind_name(Intervention::Kind k) {
  switch (k) {
    case Intervention::Kind::DisableExperts: return "disable-experts";
    case Intervention::Kind::ForceExperts: return "force-experts";
    case Intervention::Kind::ScaleShared: return "scale-shared-expert";
    case Intervention::Kind::Steer: return "steer";
    case Intervention::Kind::PatchResidual: return "patch-residual";
    case Intervention::Kind::ScaleDeltaNetState: return "scale-deltanet-state";
  }
  return "?";
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void Session::validate(const ForwardOptions& o, int n) const {
  const ModelConfig& c = model_.config();
  const int E = c.num_experts, K = c.experts_per_token, H = c.hidden_size;
  for (size_t i = 0; i < o.interventions.size(); ++i) {
    const Intervention& iv = o.interventions[i];
    auto bad = [&](auto... why) { fail("intervention ", i, " (", kind_name(iv.kind), "): ", why...); };
    bool any_layer = iv.kind == Intervention::Kind::ScaleShared || iv.kind == Intervention::Kind::ScaleDeltaNetState;
    if (iv.layer < (any_layer ? -1 : 0) || iv.layer >= c.num_layers)
      bad("layer ", iv.layer, " is outside [0, ", c.num_layers, ")");
    if (!std::isfinite(iv.scale)) bad("scale must be finite");
    for (int p : iv.positions)
      if (p < 0) bad("position ", p, " is negative");
    switch (iv.kind) {
      case Intervention::Kind::DisableExperts:
      case Intervention::Kind::ForceExperts: {
        if (iv.experts.empty()) bad("no experts given");
        std::vector<int> seen;
        for (int e : iv.experts) {
          if (e < 0 || e >= E) bad("expert ", e, " is outside [0, ", E, ")");
          if (std::find(seen.begin(), seen.end(), e) != seen.end()) bad("expert ", e, " is listed twice");
          seen.push_back(e);
        }
        if (iv.kind == Intervention::Kind::DisableExperts && E - int(seen.size()) < K)
          bad("disabling ", seen.size(), " of ", E, " experts leaves fewer than top-k (", K, ")");
        if (iv.kind == Intervention::Kind::ForceExperts && int(seen.size()) > K)
          bad("forcing ", seen.size(), " experts exceeds top-k (", K, ")");
        break;
      }
      case Intervention::Kind::Steer:
        if (int(iv.vector.size()) != H) bad("vector has ", iv.vector.size(), " values; hidden size is ", H);
        break;
      case Intervention::Kind::PatchResidual:
        if (iv.positions.empty()) bad("needs at least one position");
        if (iv.vector.size() != iv.positions.size() * size_t(H))
          bad("values hold ", iv.vector.size(), " numbers; ", iv.positions.size(), " positions x hidden ", H, " needed");
        break;
      case Intervention::Kind::ScaleDeltaNetState:
        if (iv.layer >= 0 && c.layer_kinds[size_t(iv.layer)] != LayerKind::DeltaNet)
          bad("layer ", iv.layer, " is not a DeltaNet layer");
        break;
      case Intervention::Kind::ScaleShared: break;
    }
  }
  for (int l : o.capture.attention_layers)
    if (l < 0 || l >= c.num_layers || c.layer_kinds[size_t(l)] != LayerKind::Attention)
      fail("capture: layer ", l, " is not an attention layer");
  for (int h : o.capture.attention_heads)
    if (h < 0 || h >= c.num_heads) fail("capture: attention head ", h, " is outside [0, ", c.num_heads, ")");
  if (!o.capture.attention_layers.empty()) {
    size_t heads = o.capture.attention_heads.empty() ? size_t(c.num_heads) : o.capture.attention_heads.size();
    double bytes = double(o.capture.attention_layers.size()) * heads * n * (double(pos_) + n) * 4;
    if (bytes > double(kMaxAttentionCaptureBytes))
      fail("capture: attention weights of ", o.capture.attention_layers.size(), " layers x ", heads, " heads x ", n,
           " queries x ", pos_ + n, " keys need ", int64_t(bytes / (1 << 20)), " MiB, over the ",
           kMaxAttentionCaptureBytes >> 20, " MiB limit: choose fewer layers or heads, or a shorter span");
  }
}

void Session::apply_state_interventions(const ForwardOptions& o) {
  const ModelConfig& c = model_.config();
  for (const Intervention& iv : o.interventions) {
    if (iv.kind != Intervention::Kind::ScaleDeltaNetState) continue;
    for (int l = 0; l < c.num_layers; ++l) {
      if (!applies(iv, l) || c.layer_kinds[size_t(l)] != LayerKind::DeltaNet) continue;
      LayerState& L = layers_[size_t(l)];
      be_.scale(L.recurrent, iv.scale, L.recurrent->count());
      if (iv.scale == 0.f) be_.fill(L.conv, 0.f, L.conv->count());
    }
  }
}

ForwardResult Session::forward(const int32_t* ids, int n, const ForwardOptions& options) {
  const ModelConfig& c = model_.config();
  if (n <= 0) fail("forward: no tokens given");
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      fail("token id ", ids[i], " at index ", i, " is outside the vocabulary [0, ", c.vocab_size, ")");
  if (int64_t(pos_) + n > c.max_position_embeddings)
    fail("context overflow: ", pos_, " + ", n, " tokens exceeds max_position_embeddings (", c.max_position_embeddings, ")");
  validate(options, n);

  ForwardResult r;
  r.n = n;
  r.position = pos_;
  const size_t L = size_t(c.num_layers), E = size_t(c.num_experts), K = size_t(c.experts_per_token);
  const size_t H = size_t(c.hidden_size), Hv = size_t(c.linear_value_heads);
  const CaptureSpec& cap = options.capture;
  if (cap.router) {
    r.router_logits.resize(L * n * E);
    r.router_probs.resize(L * n * E);
    r.router_ids.resize(L * n * K);
    r.router_weights.resize(L * n * K);
    r.shared_gate.resize(L * n);
  }
  if (cap.residual) r.residual.resize(L * n * H);
  if (cap.residual_mid) r.residual_mid.resize(L * n * H);
  if (cap.deltanet) {
    size_t dn = size_t(c.num_deltanet_layers());
    r.deltanet_beta.resize(dn * n * Hv);
    r.deltanet_decay.resize(dn * n * Hv);
    r.deltanet_state_norm.resize(dn * n * Hv);
  }
  if (cap.attention_gate) r.attention_gate.resize(size_t(c.num_attention_layers()) * n * c.num_heads * c.head_dim);
  if (!cap.attention_layers.empty()) {
    size_t heads = cap.attention_heads.empty() ? size_t(c.num_heads) : cap.attention_heads.size();
    r.attention.resize(cap.attention_layers.size() * heads * n * (size_t(pos_) + n));
  }
  r.logits_rows = options.logits == LogitsMode::All ? n : options.logits == LogitsMode::Last ? 1 : 0;
  r.logits.resize(size_t(r.logits_rows) * c.vocab_size);

  apply_state_interventions(options);
  const int chunk = be_.prefill_chunk();
  for (int off = 0; off < n; off += chunk) {
    if (options.cancel && options.cancel->load())
      fail("cancelled after ", off, " of ", n, " tokens; the session holds the tokens before that point");
    ChunkIO io;
    io.host_ids = ids + off;
    forward_chunk(io, std::min(chunk, n - off), off, options, r);
  }
  return r;
}

std::vector<int32_t> Session::decode_greedy(int32_t first, int steps, const ForwardOptions& options) {
  const ModelConfig& c = model_.config();
  if (steps <= 0) fail("decode_greedy: ", steps, " steps; at least 1");
  if (first < 0 || first >= c.vocab_size) fail("token id ", first, " is outside the vocabulary [0, ", c.vocab_size, ")");
  if (int64_t(pos_) + steps > c.max_position_embeddings)
    fail("context overflow: ", pos_, " + ", steps, " tokens exceeds max_position_embeddings (", c.max_position_embeddings, ")");
  const CaptureSpec& cap = options.capture;
  if (cap.router || cap.residual || cap.residual_mid || cap.deltanet || cap.attention_gate || !cap.attention_layers.empty())
    fail("decode_greedy: captures are read back per call; use forward() to capture");
  validate(options, steps);
  ensure_kv_capacity(pos_ + steps);  // once, so that every step sees the same buffers

  // tokens[i] is fed at step i and tokens[i + 1] chosen by it.
  std::unique_ptr<Buffer> tokens = be_.alloc(ElemType::I32, size_t(steps) + 1);
  be_.write(View(tokens), &first, 1);
  apply_state_interventions(options);
  ForwardResult r;
  r.n = 1;
  for (int i = 0; i < steps; ++i) {
    if (options.cancel && options.cancel->load()) {
      be_.synchronize();
      fail("cancelled after ", i, " of ", steps, " steps; the session holds the tokens fed before that point");
    }
    r.position = pos_;
    ChunkIO io;
    io.device_ids = View(tokens, size_t(i));
    io.next_token = View(tokens, size_t(i) + 1);
    forward_chunk(io, 1, 0, options, r);
  }
  std::vector<int32_t> chosen(size_t(steps) + 1);
  be_.read(View(tokens), chosen.data(), chosen.size());
  chosen.erase(chosen.begin());
  return chosen;
}

void Session::forward_chunk(const ChunkIO& io, int m, int offset, const ForwardOptions& opt, ForwardResult& r) {
  const ModelConfig& c = model_.config();
  Scratch& s = scratch(m);
  const int H = c.hidden_size, E = c.num_experts, K = c.experts_per_token, NL = c.num_layers;
  const int Hv = c.linear_value_heads, attn_width = c.num_heads * c.head_dim;
  const int NDN = c.num_deltanet_layers(), NA = c.num_attention_layers();
  const int total = r.n;
  const bool last_chunk = offset + m == total;
  const CaptureSpec& cap = opt.capture;
  ensure_kv_capacity(pos_ + m);

  // Trace buffers for this chunk: [layers, m, width].
  auto trace_buf = [&](std::unique_ptr<Buffer>& b, ElemType t, size_t layers, size_t width) {
    if (!b || b->count() < layers * m * width) b = be_.alloc(t, layers * m * width);
  };
  if (cap.router) {
    trace_buf(s.t_router_logits, ElemType::F32, NL, size_t(E));
    trace_buf(s.t_router_probs, ElemType::F32, NL, size_t(E));
    trace_buf(s.t_router_ids, ElemType::I32, NL, size_t(K));
    trace_buf(s.t_router_weights, ElemType::F32, NL, size_t(K));
    trace_buf(s.t_shared_gate, ElemType::F32, NL, 1);
  }
  if (cap.residual) trace_buf(s.t_residual, ElemType::F32, NL, size_t(H));
  if (cap.residual_mid) trace_buf(s.t_residual_mid, ElemType::F32, NL, size_t(H));
  if (cap.deltanet) {
    trace_buf(s.t_dn_beta, ElemType::F32, NDN, size_t(Hv));
    trace_buf(s.t_dn_decay, ElemType::F32, NDN, size_t(Hv));
    trace_buf(s.t_dn_norm, ElemType::F32, NDN, size_t(Hv));
  }
  if (cap.attention_gate) trace_buf(s.t_attn_gate, ElemType::F32, NA, size_t(attn_width));

  // Steering vectors, uploaded once per chunk.
  std::vector<std::unique_ptr<Buffer>> steer(opt.interventions.size());
  for (size_t i = 0; i < opt.interventions.size(); ++i)
    if (opt.interventions[i].kind == Intervention::Kind::Steer) steer[i] = be_.upload(opt.interventions[i].vector);

  if (io.host_ids) be_.write(s.ids, io.host_ids, size_t(m));
  be_.embed(model_.embed(), io.host_ids ? View(s.ids) : io.device_ids, m, s.h);

  const DeltaNetShape dn{c.linear_key_heads, c.linear_value_heads, c.linear_key_dim, c.linear_value_dim, 1e-6f};
  const AttentionShape as{c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim, c.attn_output_gate,
                          float(c.rope_theta), c.rms_norm_eps};
  const size_t kv_width = size_t(c.num_kv_heads) * c.head_dim;
  std::vector<float> bias;

  int dn_index = 0, attn_index = 0;
  for (int l = 0; l < NL; ++l) {
    const LayerResources& W = model_.layer(l);
    LayerState& st = layers_[size_t(l)];
    be_.rms_norm(s.h, W.input_norm, m, H, c.rms_norm_eps, s.x);
    if (c.layer_kinds[size_t(l)] == LayerKind::DeltaNet) {
      DeltaNetTrace trace;
      if (cap.deltanet) {
        const size_t at = size_t(dn_index) * m * Hv;
        trace = {View(s.t_dn_beta, at), View(s.t_dn_decay, at), View(s.t_dn_norm, at)};
      }
      be_.matmul_group({{W.in_qkv.get(), s.qkv}, {W.in_z.get(), s.z}, {W.in_b.get(), s.b}, {W.in_a.get(), s.a}}, s.x, m);
      be_.conv_silu(s.qkv, st.conv, W.conv, m, c.conv_dim(), c.conv_kernel, s.qkv_conv);
      be_.deltanet(s.qkv_conv, s.b, s.a, W.A_log, W.dt_bias, st.recurrent, m, dn, s.core, trace);
      be_.gated_rms_norm(s.core, s.z, W.norm, m * Hv, c.linear_value_dim, c.rms_norm_eps, s.core);
      be_.matmul(*W.out, s.core, m, s.mix);
      ++dn_index;
    } else {
      // k and v go straight into the cache rows of these tokens; k is normed and rotated there.
      const View k_rows(st.k_cache, size_t(pos_) * kv_width), v_rows(st.v_cache, size_t(pos_) * kv_width);
      be_.matmul_group({{W.q.get(), s.qg}, {W.k.get(), k_rows}, {W.v.get(), v_rows}}, s.x, m);
      be_.attention_prep(s.qg, k_rows, W.q_norm, W.k_norm, m, pos_, as, s.q, s.gate);
      auto chosen = std::find(cap.attention_layers.begin(), cap.attention_layers.end(), l);
      View probs;
      if (chosen != cap.attention_layers.end()) {
        const size_t need = size_t(c.num_heads) * m * (size_t(pos_) + m);
        if (!s.attn_probs || s.attn_probs->count() < need) s.attn_probs = be_.alloc(ElemType::F32, need);
        probs = View(s.attn_probs);
      }
      be_.attention(s.q, st.k_cache, st.v_cache, m, pos_, as, s.attn, probs, c.attn_output_gate ? View(s.gate) : View());
      if (probs) {
        // Opt-in and sized by the caller: read back here, into [layer, head, token, key].
        const size_t width = size_t(pos_) + m, ctx = size_t(r.position) + total;
        std::vector<float> host(size_t(c.num_heads) * m * width);
        be_.read(probs, host.data(), host.size());
        const size_t li = size_t(chosen - cap.attention_layers.begin());
        const size_t nh = cap.attention_heads.empty() ? size_t(c.num_heads) : cap.attention_heads.size();
        for (size_t hi = 0; hi < nh; ++hi) {
          const size_t h = cap.attention_heads.empty() ? hi : size_t(cap.attention_heads[hi]);
          for (int j = 0; j < m; ++j)
            std::copy_n(&host[(h * m + j) * width], width, &r.attention[((li * nh + hi) * total + offset + j) * ctx]);
        }
      }
      if (cap.attention_gate)
        be_.copy(View(s.t_attn_gate, size_t(attn_index) * m * attn_width), s.gate, size_t(m) * attn_width);
      be_.matmul(*W.o, s.attn, m, s.mix);
      ++attn_index;
    }
    be_.add(s.h, s.mix, size_t(m) * H);
    if (cap.residual_mid) be_.copy(View(s.t_residual_mid, size_t(l) * m * H), s.h, size_t(m) * H);

    // Router interventions become a bias on the router logits: -inf disables, +inf forces.
    View router_bias;
    bias.assign(size_t(m) * E, 0.f);
    bool biased = false;
    float shared_scale = 1.0f;
    for (const Intervention& iv : opt.interventions) {
      if (iv.kind == Intervention::Kind::ScaleShared && applies(iv, l)) shared_scale *= iv.scale;
      bool disable = iv.kind == Intervention::Kind::DisableExperts, force = iv.kind == Intervention::Kind::ForceExperts;
      if (!(disable || force) || iv.layer != l) continue;
      for (int j = 0; j < m; ++j) {
        if (!covers(iv.positions, pos_ + j)) continue;
        for (int e : iv.experts) bias[size_t(j) * E + e] = disable ? -INFINITY : INFINITY;
        biased = true;
      }
    }
    if (biased) {
      be_.write(s.router_bias, bias.data(), bias.size());
      router_bias = View(s.router_bias);
    }

    // Mixture of experts with the gated shared expert.
    be_.rms_norm(s.h, W.post_norm, m, H, c.rms_norm_eps, s.x);
    // The router and the shared expert's gate read the same input (the shared expert runs in moe_experts).
    be_.matmul_group({{W.router.get(), s.router_logits, true}, {W.shared_expert_gate.get(), s.shared_gate, true}}, s.x, m);
    View probs_out = cap.router ? View(s.t_router_probs, size_t(l) * m * E) : View();
    be_.route(s.router_logits, router_bias, m, E, K, c.norm_topk_prob, s.route_ids, s.route_weights, probs_out);
    Backend::SharedExpert shared;  // removed by an intervention when its scale is 0
    if (shared_scale != 0.f)
      shared = {W.shared_gate.get(), W.shared_up.get(), W.shared_down.get(), View(s.shared_gate), shared_scale};
    be_.moe_experts(*W.gate, *W.up, *W.down, s.x, s.route_ids, s.route_weights, m, K, s.routed, shared);
    be_.add(s.h, s.routed, size_t(m) * H);

    // Residual-stream edits after this layer.
    for (size_t i = 0; i < opt.interventions.size(); ++i) {
      const Intervention& iv = opt.interventions[i];
      if (iv.layer != l) continue;
      if (iv.kind == Intervention::Kind::Steer) {
        for (int j = 0; j < m; ++j)
          if (covers(iv.positions, pos_ + j)) be_.add(View(s.h, size_t(j) * H), steer[i], size_t(H), iv.scale);
      } else if (iv.kind == Intervention::Kind::PatchResidual) {
        for (size_t k = 0; k < iv.positions.size(); ++k) {
          int j = iv.positions[k] - pos_;
          if (j >= 0 && j < m) be_.write(View(s.h, size_t(j) * H), &iv.vector[k * size_t(H)], size_t(H));
        }
      }
    }

    if (cap.router) {
      be_.copy(View(s.t_router_logits, size_t(l) * m * E), s.router_logits, size_t(m) * E);
      be_.copy(View(s.t_router_ids, size_t(l) * m * K), s.route_ids, size_t(m) * K);
      be_.copy(View(s.t_router_weights, size_t(l) * m * K), s.route_weights, size_t(m) * K);
      be_.copy(View(s.t_shared_gate, size_t(l) * m), s.shared_gate, size_t(m));
    }
    if (cap.residual) be_.copy(View(s.t_residual, size_t(l) * m * H), s.h, size_t(m) * H);
  }

  // Logits: every row, or the last row of the last chunk.
  const int V = c.vocab_size;
  int rows = 0, first = 0, out_row = 0;
  if (io.next_token) rows = 1, first = m - 1;
  else if (opt.logits == LogitsMode::All) rows = m, first = 0, out_row = offset;
  else if (opt.logits == LogitsMode::Last && last_chunk) rows = 1, first = m - 1, out_row = 0;
  if (rows) {
    if (!s.logits || s.logits->count() < size_t(rows) * V) s.logits = be_.alloc(ElemType::F32, size_t(rows) * V);
    be_.rms_norm(View(s.h, size_t(first) * H), model_.final_norm(), rows, H, c.rms_norm_eps, s.x);
    be_.matmul(model_.lm_head(), s.x, rows, s.logits);
  }
  if (io.next_token) {  // greedy decoding: the token stays on the backend, and nothing waits for it
    be_.argmax(s.logits, 1, V, io.next_token);
    be_.flush();
    pos_ += m;
    return;
  }
  be_.synchronize();
  if (rows) be_.read(s.logits, r.logits.data() + size_t(out_row) * V, size_t(rows) * V);

  // Read the traces back into [layers, total, width] at this chunk's offset.
  auto read_trace = [&](const std::unique_ptr<Buffer>& b, void* dst, int layers, size_t width) {
    for (int l = 0; l < layers; ++l)
      be_.read(View(b, size_t(l) * m * width), static_cast<char*>(dst) + (size_t(l) * total + offset) * width * 4,
               size_t(m) * width);
  };
  if (cap.router) {
    read_trace(s.t_router_logits, r.router_logits.data(), NL, size_t(E));
    read_trace(s.t_router_probs, r.router_probs.data(), NL, size_t(E));
    read_trace(s.t_router_ids, r.router_ids.data(), NL, size_t(K));
    read_trace(s.t_router_weights, r.router_weights.data(), NL, size_t(K));
    read_trace(s.t_shared_gate, r.shared_gate.data(), NL, 1);
    for (int l = 0; l < NL; ++l)
      for (int j = 0; j < m; ++j) {
        float& g = r.shared_gate[size_t(l) * total + offset + j];
        g = sigmoid(g);
      }
  }
  if (cap.residual) read_trace(s.t_residual, r.residual.data(), NL, size_t(H));
  if (cap.residual_mid) read_trace(s.t_residual_mid, r.residual_mid.data(), NL, size_t(H));
  if (cap.deltanet) {
    read_trace(s.t_dn_beta, r.deltanet_beta.data(), NDN, size_t(Hv));
    read_trace(s.t_dn_decay, r.deltanet_decay.data(), NDN, size_t(Hv));
    read_trace(s.t_dn_norm, r.deltanet_state_norm.data(), NDN, size_t(Hv));
  }
  if (cap.attention_gate) {
    read_trace(s.t_attn_gate, r.attention_gate.data(), NA, size_t(attn_width));
    for (int a = 0; a < NA; ++a)
      for (size_t i = 0; i < size_t(m) * attn_width; ++i) {
        float& g = r.attention_gate[(size_t(a) * total + offset) * attn_width + i];
        g = sigmoid(g);
      }
  }
  pos_ += m;
}

}  // namespace moelens
