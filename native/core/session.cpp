#include "session.h"

#include <algorithm>
#include <cmath>

#include "error.h"

namespace moelens {

// The model-wide work buffers for up to `rows` tokens (the plan has its own), reused across calls.
struct Session::Scratch {
  int rows = 0;
  std::unique_ptr<Buffer> ids, h, x, logits;
  std::unique_ptr<PlanScratch> plan;
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
  size_t bytes = 0;
  auto add = [&](const std::unique_ptr<Buffer>& b) { bytes += b ? b->count() * elem_bytes(b->type()) : 0; };
  for (const LayerState& L : layers_) {
    add(L.conv);
    add(L.recurrent);
    add(L.k_cache);
    add(L.v_cache);
  }
  if (scratch_) {
    for (const auto* b : {&scratch_->ids, &scratch_->h, &scratch_->x, &scratch_->logits}) add(*b);
    bytes += scratch_->plan->elements() * 4;
  }
  return bytes;
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
  s->kv_type_ = kv_type_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerState& src = layers_[i];
    LayerState& dst = s->layers_[i];
    if (src.conv) be_.copy(dst.conv, src.conv, src.conv->count());
    if (src.recurrent) be_.copy(dst.recurrent, src.recurrent, src.recurrent->count());
    if (src.k_cache) {
      dst.k_cache = be_.alloc(src.k_cache->type(), src.k_cache->count());
      dst.v_cache = be_.alloc(src.v_cache->type(), src.v_cache->count());
      be_.copy(dst.k_cache, src.k_cache, src.k_cache->count());
      be_.copy(dst.v_cache, src.v_cache, src.v_cache->count());
    }
  }
  return s;
}

// Grows the KV caches to hold `tokens` positions, in the type the backend takes now (kv_cache_type:
// a GPU's precision may have changed since they were allocated; the rows held are converted).
void Session::ensure_kv_capacity(int tokens) {
  const ModelConfig& c = model_.config();
  const ElemType type = be_.kv_cache_type(attention_shape(c));
  if (tokens <= kv_capacity_ && (kv_type_ == type || kv_capacity_ == 0)) return;
  int cap = std::max(256, kv_capacity_);
  while (cap < tokens) cap *= 2;
  cap = std::min(cap, c.max_position_embeddings);
  const size_t width = size_t(c.num_kv_heads) * c.head_dim;
  for (int i = 0; i < c.num_layers; ++i) {
    if (c.layer_kinds[size_t(i)] != LayerKind::Attention) continue;
    LayerState& L = layers_[size_t(i)];
    auto k = be_.alloc(type, size_t(cap) * width);
    auto v = be_.alloc(type, size_t(cap) * width);
    if (L.k_cache) {
      be_.copy(k, L.k_cache, size_t(pos_) * width);
      be_.copy(v, L.v_cache, size_t(pos_) * width);
    }
    L.k_cache = std::move(k);
    L.v_cache = std::move(v);
  }
  kv_capacity_ = cap;
  kv_type_ = type;
}

Session::Scratch& Session::scratch(int m) {
  if (scratch_ && scratch_->rows >= m) return *scratch_;
  const size_t H = size_t(model_.config().hidden_size);
  auto s = std::make_unique<Scratch>();
  s->rows = m;
  s->ids = be_.alloc(ElemType::I32, size_t(m));
  s->h = be_.alloc(ElemType::F32, size_t(m) * H);
  s->x = be_.alloc(ElemType::F32, size_t(m) * H);
  scratch_.reset();  // before the buffers of the new size are allocated
  s->plan = model_.plan().scratch(be_, m);
  scratch_ = std::move(s);
  return *scratch_;
}

namespace {

bool applies(const Intervention& iv, int layer) { return iv.layer == -1 || iv.layer == layer; }

const char* kind_name(Intervention::Kind k) {
  switch (k) {
    case Intervention::Kind::DisableExperts: return "disable-experts";
    case Intervention::Kind::ForceExperts: return "force-experts";
    case Intervention::Kind::BiasExperts: return "bias-experts";
    case Intervention::Kind::ScaleShared: return "scale-shared-expert";
    case Intervention::Kind::ScaleDeltaNetState: return "scale-deltanet-state";
  }
  return "?";
}

}  // namespace

void Session::validate(const ForwardOptions& o) const {
  const ModelConfig& c = model_.config();
  const std::vector<LayerParts>& parts = model_.plan().parts();
  const int E = c.num_experts, K = c.experts_per_token;
  for (size_t i = 0; i < o.interventions.size(); ++i) {
    const Intervention& iv = o.interventions[i];
    auto bad = [&](auto... why) { fail("intervention ", i, " (", kind_name(iv.kind), "): ", why...); };
    bool any_layer = iv.kind == Intervention::Kind::ScaleShared || iv.kind == Intervention::Kind::ScaleDeltaNetState;
    if (iv.layer < (any_layer ? -1 : 0) || iv.layer >= c.num_layers)
      bad("layer ", iv.layer, " is outside [0, ", c.num_layers, ")");
    if (!std::isfinite(iv.scale)) bad("scale must be finite");
    for (int p : iv.positions)
      if (p < 0) bad("position ", p, " is negative");
    const bool router = iv.kind == Intervention::Kind::DisableExperts || iv.kind == Intervention::Kind::ForceExperts ||
                        iv.kind == Intervention::Kind::BiasExperts || iv.kind == Intervention::Kind::ScaleShared;
    if (router && iv.layer >= 0 && !parts[size_t(iv.layer)].moe) bad("layer ", iv.layer, " has no mixture of experts");
    switch (iv.kind) {
      case Intervention::Kind::DisableExperts:
      case Intervention::Kind::ForceExperts:
      case Intervention::Kind::BiasExperts: {
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
        if (iv.kind == Intervention::Kind::BiasExperts) {
          if (iv.values.size() != iv.experts.size())
            bad(iv.values.size(), " biases for ", iv.experts.size(), " experts (one each)");
          for (float v : iv.values)
            if (!std::isfinite(v)) bad("biases must be finite (disable or force an expert instead)");
        }
        break;
      }
      case Intervention::Kind::ScaleDeltaNetState:
        if (iv.layer >= 0 && !parts[size_t(iv.layer)].deltanet) bad("layer ", iv.layer, " is not a DeltaNet layer");
        break;
      case Intervention::Kind::ScaleShared: break;
    }
  }
}

void Session::apply_state_interventions(const ForwardOptions& o) {
  const std::vector<LayerParts>& parts = model_.plan().parts();
  for (const Intervention& iv : o.interventions) {
    if (iv.kind != Intervention::Kind::ScaleDeltaNetState) continue;
    for (size_t l = 0; l < parts.size(); ++l) {
      if (!applies(iv, int(l)) || !parts[l].deltanet) continue;
      LayerState& L = layers_[l];
      be_.scale(L.recurrent, iv.scale, L.recurrent->count());
      if (iv.scale == 0.f) be_.fill(L.conv, 0.f, L.conv->count());
    }
  }
}

// Puts back the state a fork() took before a call that failed.
void Session::restore(Session& before) {
  layers_ = std::move(before.layers_);
  pos_ = before.pos_;
  kv_capacity_ = before.kv_capacity_;
  kv_type_ = before.kv_type_;
}

ForwardResult Session::forward(const int32_t* ids, int n, const ForwardOptions& options) {
  const ModelConfig& c = model_.config();
  if (n <= 0) fail("forward: no tokens given");
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab_size)
      fail("token id ", ids[i], " at index ", i, " is outside the vocabulary [0, ", c.vocab_size, ")");
  if (int64_t(pos_) + n > c.max_position_embeddings)
    fail("context overflow: ", pos_, " + ", n, " tokens exceeds max_position_embeddings (", c.max_position_embeddings, ")");
  validate(options);
  if (options.hooks.patterns.empty()) return forward_calls(ids, n, options);
  // A hook function may throw anywhere in the forward pass: the call then leaves the state as it was.
  std::unique_ptr<Session> before = fork();
  try {
    return forward_calls(ids, n, options);
  } catch (...) {
    be_.synchronize();
    restore(*before);
    throw;
  }
}

ForwardResult Session::forward_calls(const int32_t* ids, int n, const ForwardOptions& options) {
  ForwardResult r;
  r.n = n;
  r.position = pos_;
  HookRun hooks(be_, model_.config(), model_.plan().parts(), options.capture, options.edits, options.hooks, pos_, n,
                &r.captures);
  r.logits_rows = options.logits == LogitsMode::All ? n : options.logits == LogitsMode::Last ? 1 : 0;
  r.logits.resize(size_t(r.logits_rows) * model_.config().vocab_size);

  apply_state_interventions(options);
  const int chunk = be_.prefill_chunk();
  for (int off = 0; off < n; off += chunk) {
    if (options.cancel && options.cancel->load())
      fail("cancelled after ", off, " of ", n, " tokens; the session holds the tokens before that point");
    ChunkIO io;
    io.host_ids = ids + off;
    forward_chunk(io, std::min(chunk, n - off), off, options, hooks, r);
  }
  return r;
}

std::vector<int32_t> Session::decode_greedy(int32_t first, int steps, const ForwardOptions& options) {
  const ModelConfig& c = model_.config();
  if (steps <= 0) fail("decode_greedy: ", steps, " steps; at least 1");
  if (first < 0 || first >= c.vocab_size) fail("token id ", first, " is outside the vocabulary [0, ", c.vocab_size, ")");
  if (int64_t(pos_) + steps > c.max_position_embeddings)
    fail("context overflow: ", pos_, " + ", steps, " tokens exceeds max_position_embeddings (", c.max_position_embeddings, ")");
  if (!options.capture.names.empty() || !options.hooks.patterns.empty())
    fail("decode_greedy: captures and hook functions are read back per call; use forward() for them");
  validate(options);
  ensure_kv_capacity(pos_ + steps);  // once, so that every step sees the same buffers

  // tokens[i] is fed at step i and tokens[i + 1] chosen by it.
  std::unique_ptr<Buffer> tokens = be_.alloc(ElemType::I32, size_t(steps) + 1);
  be_.write(View(tokens), &first, 1);
  ForwardResult r;
  r.n = 1;
  HookRun hooks(be_, c, model_.plan().parts(), options.capture, options.edits, options.hooks, pos_, steps, &r.captures);
  apply_state_interventions(options);
  for (int i = 0; i < steps; ++i) {
    if (options.cancel && options.cancel->load()) {
      be_.synchronize();
      fail("cancelled after ", i, " of ", steps, " steps; the session holds the tokens fed before that point");
    }
    r.position = pos_;
    ChunkIO io;
    io.device_ids = View(tokens, size_t(i));
    io.next_token = View(tokens, size_t(i) + 1);
    forward_chunk(io, 1, 0, options, hooks, r);
  }
  std::vector<int32_t> chosen(size_t(steps) + 1);
  be_.read(View(tokens), chosen.data(), chosen.size());
  chosen.erase(chosen.begin());
  return chosen;
}

void Session::forward_chunk(const ChunkIO& io, int m, int offset, const ForwardOptions& opt, HookRun& hooks,
                            ForwardResult& r) {
  const ModelConfig& c = model_.config();
  const ModelPlan& plan = model_.plan();
  const int H = c.hidden_size, V = c.vocab_size;
  Scratch& s = scratch(m);
  ensure_kv_capacity(pos_ + m);
  hooks.begin_chunk(m, pos_, offset);

  be_.begin_chunk(m);
  if (io.host_ids) be_.write(s.ids, io.host_ids, size_t(m));
  be_.embed(model_.embed(), io.host_ids ? View(s.ids) : io.device_ids, m, s.h);
  hooks.tap(HookId::Embed, -1, s.h);
  const LayerStep step{be_, model_, m, pos_, View(s.h), View(s.x), hooks, opt.interventions};
  for (int l = 0; l < c.num_layers; ++l) plan.layer(step, *s.plan, layers_[size_t(l)], l);

  // Logits: the rows asked for (the last of the call, or all), or every row when a hook needs them.
  const bool every_row = hooks.active(HookId::FinalNorm, -1) || hooks.active(HookId::Logits, -1);
  int rows = 0, first = 0;
  if (io.next_token || (opt.logits == LogitsMode::Last && offset + m == r.n)) rows = 1, first = m - 1;
  if (opt.logits == LogitsMode::All || every_row) rows = m, first = 0;
  if (rows) {
    if (!s.logits || s.logits->count() < size_t(rows) * V) s.logits = be_.alloc(ElemType::F32, size_t(rows) * V);
    be_.rms_norm(View(s.h, size_t(first) * H), model_.final_norm(), rows, H, c.rms_norm_eps, s.x);
    if (every_row) hooks.tap(HookId::FinalNorm, -1, s.x);
    // Exact (fp32) even where prompts multiply in lower precision: the logits are what every analysis
    // reads, and near-ties of the top-1 flip with the rounding of fp16 operands.
    be_.matmul_group({{&model_.lm_head(), s.logits, true}}, s.x, rows);
    if (every_row) hooks.tap(HookId::Logits, -1, s.logits);
  }
  if (io.next_token) {  // greedy decoding: the token stays on the backend, and nothing waits for it
    be_.argmax(View(s.logits, size_t(rows - 1) * V), 1, V, io.next_token);
    be_.flush();
    pos_ += m;
    return;
  }
  be_.synchronize();
  if (opt.logits == LogitsMode::All) be_.read(s.logits, r.logits.data() + size_t(offset) * V, size_t(m) * V);
  else if (opt.logits == LogitsMode::Last && offset + m == r.n)
    be_.read(View(s.logits, size_t(rows - 1) * V), r.logits.data(), size_t(V));
  hooks.end_chunk();
  pos_ += m;
}

}  // namespace moelens
