#include "hook_run.h"

#include <algorithm>
#include <cmath>

#include "error.h"

namespace moelens {

// An edit resolved against one hook point instance: rows and channel runs to touch.
struct HookRun::CompiledEdit {
  HookEdit::Op op;
  std::vector<int> positions;                // absolute; empty: all
  std::vector<std::pair<int, int>> runs;     // [first channel, count) runs, in selection order
  int selected = 0;                          // channels in the runs
  std::vector<float> host_values;            // Mean: unused; Set / Add: [1 or positions, selected]
  std::unique_ptr<Buffer> values;            // the same, on the backend
  bool per_position = false;
  float scale = 1.0f;
};

struct HookRun::Slot {
  const HookPoint* point;
  int layer;
  std::string name;
  int width;  // values per token (AttentionProbs: heads)
  int captured = -1;  // index into out_
  std::vector<const CompiledEdit*> edits;
  int function = -1;  // which hook pattern calls a function here
  std::unique_ptr<Buffer> dev;  // this chunk's capture
};

namespace {

const char* op_name(HookEdit::Op op) {
  switch (op) {
    case HookEdit::Op::Set: return "set";
    case HookEdit::Op::Add: return "add";
    case HookEdit::Op::Scale: return "scale";
    case HookEdit::Op::Zero: return "zero";
    case HookEdit::Op::Mean: return "mean";
  }
  return "?";
}

bool is_head_dim(HookDim d) {
  return d == HookDim::Heads || d == HookDim::KvHeads || d == HookDim::KeyHeads || d == HookDim::ValueHeads;
}

}  // namespace

HookRun::HookRun(Backend& be, const ModelConfig& c, const std::vector<LayerParts>& parts, const CaptureSpec& capture,
                 const std::vector<HookEdit>& edits, const HookFunctions& functions, int pos0, int n,
                 std::vector<Captured>* out)
    : be_(be), c_(c), out_(out), functions_(functions), layer_slots_(parts.size() + 1), pos0_(pos0), n_(n) {
  enabled_ = !capture.names.empty() || !edits.empty() || !functions.patterns.empty();
  if (!enabled_) return;
  slots_.assign(size_t(kHookCount) * layer_slots_, nullptr);
  const std::vector<HookInstance> instances = hook_instances(parts);
  auto slot = [&](const HookInstance& h) -> Slot& {
    Slot*& s = slots_[index(h.id, h.layer)];
    if (!s) {
      owned_.push_back(std::make_unique<Slot>());
      s = owned_.back().get();
      s->point = &hook_point(h.id);
      s->layer = h.layer;
      s->name = h.name;
      s->width = hook_width(c, *s->point);
    }
    return *s;
  };
  auto matches = [&](const std::string& pattern, const std::string& what) {
    std::vector<const HookInstance*> found;
    for (const HookInstance& h : instances)
      if (hook_pattern_matches(pattern, h)) found.push_back(&h);
    if (found.empty()) fail(what, ": '", pattern, "' names no hook point of this model (model.hookPoints() lists them)");
    return found;
  };

  // Captures: which rows of the call are kept, and the result arrays.
  keep_.assign(size_t(n), -1);
  for (int t = 0; t < n; ++t)
    if (capture.positions.empty() ||
        std::find(capture.positions.begin(), capture.positions.end(), pos0 + t) != capture.positions.end())
      keep_[size_t(t)] = kept_++;
  for (int p : capture.positions)
    if (p < 0) fail("capture: position ", p, " is negative");
  for (int h : capture.attention_heads)
    if (h < 0 || h >= c.num_heads) fail("capture: attention head ", h, " is outside [0, ", c.num_heads, ")");
  if (capture.attention_heads.empty())
    for (int h = 0; h < c.num_heads; ++h) heads_.push_back(h);
  else heads_ = capture.attention_heads;
  for (const std::string& pattern : capture.names)
    for (const HookInstance* h : matches(pattern, "capture")) {
      Slot& s = slot(*h);
      if (s.captured >= 0) continue;
      s.captured = int(out->size());
      Captured cap;
      cap.name = h->name;
      cap.id = h->id;
      cap.layer = h->layer;
      size_t count;
      if (s.point->layout == HookLayout::AttentionProbs) {
        cap.shape = {int(heads_.size()), kept_, pos0 + n};
        double bytes = double(heads_.size()) * kept_ * (double(pos0) + n) * 4;
        if (bytes > double(kMaxAttentionCaptureBytes))
          fail("capture: ", h->name, " of ", heads_.size(), " heads x ", kept_, " queries x ", pos0 + n, " keys needs ",
               int64_t(bytes / (1 << 20)), " MiB, over the ", kMaxAttentionCaptureBytes >> 20,
               " MiB limit: choose fewer heads or positions, or a shorter span");
        count = size_t(heads_.size()) * kept_ * (size_t(pos0) + n);
      } else {
        cap.shape = {kept_};
        for (HookDim d : s.point->dims) cap.shape.push_back(dim_size(c, d));
        count = size_t(kept_) * s.width;
      }
      if (s.point->dtype == HookDtype::I32) cap.i32.resize(count);
      else cap.f32.resize(count);
      out->push_back(std::move(cap));
    }

  // Edits, compiled per hook point instance.
  for (size_t i = 0; i < edits.size(); ++i) {
    const HookEdit& e = edits[i];
    const std::string what = "edit " + std::to_string(i) + " (" + op_name(e.op) + ")";
    if (e.op == HookEdit::Op::Scale && !std::isfinite(e.scale)) fail(what, ": scale must be finite");
    for (int p : e.positions)
      if (p < 0) fail(what, ": position ", p, " is negative");
    for (const HookInstance* h : matches(e.name, what)) {
      Slot& s = slot(*h);
      const HookPoint& p = *s.point;
      if (p.access != HookAccess::Edit) fail(what, ": ", h->name, " is read-only (capture it, or edit what it is computed from)");
      auto ce = std::make_unique<CompiledEdit>();
      ce->op = e.op;
      ce->positions = e.positions;
      ce->scale = e.scale;
      std::vector<int> channels;
      if (!e.heads.empty()) {
        if (p.dims.size() != 2 || !is_head_dim(p.dims[0]))
          fail(what, ": ", h->name, " has no heads (its shape is [n", p.dims.empty() ? "" : ", ",
               p.dims.empty() ? "" : dim_name(p.dims[0]), p.dims.size() > 1 ? ", ..." : "", "])");
        const int heads = dim_size(c, p.dims[0]), hd = dim_size(c, p.dims[1]);
        for (int head : e.heads) {
          if (head < 0 || head >= heads) fail(what, ": head ", head, " is outside [0, ", heads, ") of ", h->name);
          for (int k = 0; k < hd; ++k) channels.push_back(head * hd + k);
        }
      }
      for (int ch : e.channels) {
        if (ch < 0 || ch >= s.width) fail(what, ": channel ", ch, " is outside [0, ", s.width, ") of ", h->name);
        channels.push_back(ch);
      }
      if (e.heads.empty() && e.channels.empty())
        for (int k = 0; k < s.width; ++k) channels.push_back(k);
      for (int ch : channels) {
        if (!ce->runs.empty() && ce->runs.back().first + ce->runs.back().second == ch) ++ce->runs.back().second;
        else ce->runs.push_back({ch, 1});
      }
      ce->selected = int(channels.size());
      if (e.op == HookEdit::Op::Set || e.op == HookEdit::Op::Add) {
        const size_t row = size_t(ce->selected);
        if (e.values.size() == row) ce->per_position = false;
        else if (!e.positions.empty() && e.values.size() == row * e.positions.size()) ce->per_position = true;
        else
          fail(what, ": ", e.values.size(), " values for ", h->name, "; ", row, " (one per selected channel)",
               e.positions.empty() ? "" : " or that many per listed position", " needed");
        ce->host_values = e.values;
        ce->values = be.upload(e.values);
      }
      s.edits.push_back(ce.get());
      edits_.push_back(std::move(ce));
    }
  }

  // Hook functions: one per point (the first pattern that names it).
  for (size_t i = 0; i < functions.patterns.size(); ++i)
    for (const HookInstance* h : matches(functions.patterns[i], "hook " + std::to_string(i))) {
      Slot& s = slot(*h);
      if (s.point->access != HookAccess::Edit)
        fail("hook ", i, ": ", h->name, " is read-only (capture it instead)");
      if (s.function < 0) s.function = int(i);
    }
}

HookRun::~HookRun() = default;

void HookRun::begin_chunk(int m, int pos, int offset) {
  m_ = m, pos_ = pos, offset_ = offset;
  for (auto& s : owned_) {
    if (s->captured < 0) continue;
    const size_t need = s->point->layout == HookLayout::AttentionProbs ? size_t(c_.num_heads) * m * (size_t(pos) + m)
                                                                        : size_t(m) * s->width;
    if (!s->dev || s->dev->count() < need)
      s->dev = be_.alloc(s->point->dtype == HookDtype::I32 ? ElemType::I32 : ElemType::F32, need);
  }
}

View HookRun::sink(HookId id, int layer) {
  if (!enabled_) return View();
  Slot* s = slots_[index(id, layer)];
  return s && s->captured >= 0 ? View(s->dev) : View();
}

std::vector<int> HookRun::chunk_rows(const std::vector<int>& positions) const {
  std::vector<int> rows;
  if (positions.empty()) {
    for (int j = 0; j < m_; ++j) rows.push_back(j);
  } else {
    for (int p : positions) rows.push_back(p >= pos_ && p < pos_ + m_ ? p - pos_ : -1);
  }
  return rows;
}

void HookRun::read_rows(View v, int stride, int width, std::vector<float>& host) {
  host.resize(size_t(m_) * width);
  be_.synchronize();
  if (stride == width) be_.read(v, host.data(), host.size());
  else
    for (int j = 0; j < m_; ++j) be_.read(v.at(size_t(j) * stride), &host[size_t(j) * width], size_t(width));
}

void HookRun::write_rows(View v, int stride, int width, const std::vector<float>& host) {
  if (stride == width) be_.write(v, host.data(), host.size());
  else
    for (int j = 0; j < m_; ++j) be_.write(v.at(size_t(j) * stride), &host[size_t(j) * width], size_t(width));
}

void HookRun::apply_edit(const CompiledEdit& e, View v, int stride, int width) {
  const std::vector<int> rows = chunk_rows(e.positions);
  std::vector<float> mean;
  if (e.op == HookEdit::Op::Mean) {
    std::vector<float> host;
    read_rows(v, stride, width, host);
    mean.assign(size_t(width), 0.f);
    for (int j = 0; j < m_; ++j)
      for (int k = 0; k < width; ++k) mean[size_t(k)] += host[size_t(j) * width + k];
    for (float& x : mean) x /= float(m_);
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const int j = rows[r];
    if (j < 0) continue;
    const size_t value_row = e.per_position ? r * size_t(e.selected) : 0;
    size_t at = 0;  // offset of the run in the selection
    for (const auto& [first, count] : e.runs) {
      const View dst = v.at(size_t(j) * stride + size_t(first));
      switch (e.op) {
        case HookEdit::Op::Set: be_.copy(dst, View(e.values, value_row + at), size_t(count)); break;
        case HookEdit::Op::Add: be_.add(dst, View(e.values, value_row + at), size_t(count)); break;
        case HookEdit::Op::Scale: be_.scale(dst, e.scale, size_t(count)); break;
        case HookEdit::Op::Zero: be_.fill(dst, 0.f, size_t(count)); break;
        case HookEdit::Op::Mean: be_.write(dst, &mean[size_t(first)], size_t(count)); break;
      }
      at += size_t(count);
    }
  }
}

void HookRun::apply(Slot& s, View v, int stride) {
  const int width = s.width;
  if (stride == 0) stride = width;
  for (const CompiledEdit* e : s.edits) apply_edit(*e, v, stride, width);
  if (s.function >= 0) {
    std::vector<float> host;
    read_rows(v, stride, width, host);
    HookCall call{s.function, s.name, s.layer, {m_}, pos_, host};
    for (HookDim d : s.point->dims) call.shape.push_back(dim_size(c_, d));
    if (functions_.call(call)) {
      if (host.size() != size_t(m_) * width)
        fail("hook ", s.function, " (", s.name, "): the replacement has ", host.size(), " values; ", size_t(m_) * width,
             " expected");
      write_rows(v, stride, width, host);
    }
  }
  if (s.captured >= 0) {
    if (stride == width) be_.copy(View(s.dev), v, size_t(m_) * width);
    else
      for (int j = 0; j < m_; ++j) be_.copy(View(s.dev, size_t(j) * width), v.at(size_t(j) * stride), size_t(width));
  }
}

void HookRun::end_chunk() {
  if (!enabled_) return;
  std::vector<uint32_t> host;
  for (auto& s : owned_) {
    if (s->captured < 0) continue;
    Captured& cap = (*out_)[size_t(s->captured)];
    void* base = s->point->dtype == HookDtype::I32 ? static_cast<void*>(cap.i32.data()) : static_cast<void*>(cap.f32.data());
    uint32_t* dst = static_cast<uint32_t*>(base);
    if (s->point->layout == HookLayout::AttentionProbs) {
      const size_t width = size_t(pos_) + m_, context = size_t(pos0_) + n_;
      host.resize(size_t(c_.num_heads) * m_ * width);
      be_.read(View(s->dev), host.data(), host.size());
      for (size_t hi = 0; hi < heads_.size(); ++hi)
        for (int j = 0; j < m_; ++j) {
          const int row = keep_[size_t(offset_ + j)];
          if (row < 0) continue;
          std::copy_n(&host[(size_t(heads_[hi]) * m_ + j) * width], width, &dst[(hi * size_t(kept_) + row) * context]);
        }
      continue;
    }
    const size_t width = size_t(s->width);
    host.resize(size_t(m_) * width);
    be_.read(View(s->dev), host.data(), host.size());
    for (int j = 0; j < m_; ++j) {
      const int row = keep_[size_t(offset_ + j)];
      if (row >= 0) std::copy_n(&host[size_t(j) * width], width, &dst[size_t(row) * width]);
    }
  }
}

}  // namespace moelens
