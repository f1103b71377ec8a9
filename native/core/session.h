// A session: one sequence's state (KV cache, DeltaNet conv and recurrent state, position) and the
// forward pass that advances it. Prefill in one or several calls equals one long prefill; decode feeds
// one token; fork() deep-copies the state so a notebook can branch.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "model.h"

namespace moelens {

enum class LogitsMode { None, Last, All };

struct CaptureSpec {
  bool router = false;    // router logits, top-k ids and weights
  bool residual = false;  // residual stream after each layer
};

struct ForwardOptions {
  LogitsMode logits = LogitsMode::Last;
  CaptureSpec capture;
  const std::atomic<bool>* cancel = nullptr;  // checked between layers
};

struct ForwardResult {
  int n = 0;  // tokens fed
  int logits_rows = 0;
  std::vector<float> logits;          // [logits_rows, vocab]
  std::vector<float> router_logits;   // [layers, n, experts]
  std::vector<int32_t> router_ids;    // [layers, n, k]
  std::vector<float> router_weights;  // [layers, n, k]
  std::vector<float> residual;        // [layers, n, hidden]
};

class Session {
 public:
  explicit Session(const Model& model);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int position() const { return pos_; }
  const Model& model() const { return model_; }

  ForwardResult forward(const int32_t* ids, int n, const ForwardOptions& options);
  void reset();
  std::unique_ptr<Session> fork() const;

  // Tokens processed per kernel sequence; longer inputs run in chunks of this size.
  static constexpr int kChunk = 256;

 private:
  struct LayerState {
    std::unique_ptr<Buffer> conv, recurrent;  // DeltaNet
    std::unique_ptr<Buffer> k_cache, v_cache;  // attention
  };
  struct Scratch;

  void forward_chunk(const int32_t* ids, int m, int offset, int total, const ForwardOptions& options,
                     ForwardResult& result);
  void ensure_kv_capacity(int tokens);
  Scratch& scratch(int m);

  const Model& model_;
  Backend& be_;
  int pos_ = 0;
  int kv_capacity_ = 0;
  std::vector<LayerState> layers_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace moelens
