// One forward call's use of the hook points: what it captures, the edits it applies and the hook
// functions it calls, resolved once per call against the model's hook points (hook_points.h). A model
// plan calls tap() where each value flows; with nothing asked for, a tap is one predictable branch.
// Captures are copied into backend buffers and read back once per chunk of the call, so every backend
// supports them through the Backend interface alone.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "hook_points.h"
#include "intervention.h"

namespace moelens {

// Captured attention weights are refused past this many bytes.
constexpr size_t kMaxAttentionCaptureBytes = size_t(512) << 20;

struct CaptureSpec {
  std::vector<std::string> names;    // hook point names or patterns
  std::vector<int> positions;        // absolute positions to keep (empty: every position of the call)
  std::vector<int> attention_heads;  // heads kept of blocks.{l}.attn.probs (empty: all)
};

// A hook function's view of one hook point in one chunk of a call: rows [n, dims...] of the tokens at
// position .. position + n - 1. The function may change `values` in place and return true to have them
// written back into the forward pass.
struct HookCall {
  int hook;  // which of HookFunctions::patterns matched
  const std::string& name;
  int layer;
  std::vector<int> shape;
  int position;
  std::vector<float>& values;
};

struct HookFunctions {
  std::vector<std::string> patterns;
  std::function<bool(HookCall&)> call;  // may throw: the call then fails
};

// A captured value: [n kept, dims...] (attn.probs: [heads kept, n kept, context]).
struct Captured {
  std::string name;
  HookId id;
  int layer;
  std::vector<int> shape;
  std::vector<float> f32;
  std::vector<int32_t> i32;
};

class HookRun {
 public:
  // Resolves the requests for a call of `n` tokens at position `pos0` of a model whose layers have
  // `parts`; errors name the capture, edit or hook that does not fit. Captures go to `out`.
  HookRun(Backend& be, const ModelConfig& c, const std::vector<LayerParts>& parts, const CaptureSpec& capture,
          const std::vector<HookEdit>& edits, const HookFunctions& functions, int pos0, int n, std::vector<Captured>* out);
  ~HookRun();

  // Whether anything at all uses the hook points in this call.
  bool enabled() const { return enabled_; }
  bool active(HookId id, int layer) const { return enabled_ && slots_[index(id, layer)] != nullptr; }

  // The chunk of `m` tokens at position `pos`, `offset` tokens into the call.
  void begin_chunk(int m, int pos, int offset);
  // After the backend has finished the chunk: reads its captures back.
  void end_chunk();

  // The value of a hook point flows through `v`: rows [m, width] with `stride` elements between rows
  // (0: the width). Applies edits and hook functions to it and captures it.
  void tap(HookId id, int layer, View v, int stride = 0) {
    if (!enabled_) return;
    if (Slot* s = slots_[index(id, layer)]) apply(*s, v, stride);
  }
  // Where a kernel writes a read-only point as a side output; empty when not captured.
  View sink(HookId id, int layer);

 private:
  struct Slot;
  struct CompiledEdit;
  size_t index(HookId id, int layer) const { return size_t(id) * layer_slots_ + size_t(layer + 1); }
  void apply(Slot& s, View v, int stride);
  void apply_edit(const CompiledEdit& e, View v, int stride, int width);
  void read_rows(View v, int stride, int width, std::vector<float>& host);
  void write_rows(View v, int stride, int width, const std::vector<float>& host);
  std::vector<int> chunk_rows(const std::vector<int>& positions) const;

  Backend& be_;
  const ModelConfig& c_;
  std::vector<Captured>* out_;
  const HookFunctions& functions_;
  bool enabled_ = false;
  size_t layer_slots_;
  std::vector<Slot*> slots_;  // [hook id][layer + 1]
  std::vector<std::unique_ptr<Slot>> owned_;
  std::vector<std::unique_ptr<CompiledEdit>> edits_;
  int pos0_, n_;
  std::vector<int> keep_;  // per token of the call: its row in the captures, or -1
  int kept_ = 0;
  std::vector<int> heads_;  // attn.probs heads kept
  int m_ = 0, pos_ = 0, offset_ = 0;
};

}  // namespace moelens
