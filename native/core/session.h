// A session: one sequence's state (KV cache, DeltaNet conv and recurrent state, position) and the
// forward pass that advances it. Prefill in one or several calls equals one long prefill; decode feeds
// one token; fork() deep-copies the state so a notebook can branch.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "hook_run.h"
#include "intervention.h"
#include "model.h"
#include "plan.h"

namespace moelens {

enum class LogitsMode { None, Last, All };

struct ForwardOptions {
  LogitsMode logits = LogitsMode::Last;
  CaptureSpec capture;
  std::vector<Intervention> interventions;  // router, shared-expert and state edits
  std::vector<HookEdit> edits;              // edits at hook points
  HookFunctions hooks;                      // hook functions (the call is undone if one throws)
  const std::atomic<bool>* cancel = nullptr;  // checked between chunks, so the state stays consistent
};

// Everything a call returns.
struct ForwardResult {
  int n = 0;         // tokens fed
  int position = 0;  // position of the first of them
  int logits_rows = 0;
  std::vector<float> logits;       // [logits_rows, vocab]
  std::vector<Captured> captures;  // in the order asked for
};

class Session {
 public:
  explicit Session(const Model& model);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int position() const { return pos_; }
  // Bytes of backend memory this session holds (state, caches, work buffers).
  size_t memory_bytes() const;
  const Model& model() const { return model_; }

  ForwardResult forward(const int32_t* ids, int n, const ForwardOptions& options);
  // Greedy decoding of `steps` tokens: feeds `first`, then each chosen token, which stays on the
  // backend between steps (the arg-max runs there and nothing is read back until the end, so a GPU
  // runs a step while the host records the next). Interventions and edits apply as in forward();
  // captures and hook functions are refused. Returns the chosen tokens; the last of them has not been fed, as after forward().
  std::vector<int32_t> decode_greedy(int32_t first, int steps, const ForwardOptions& options);
  void reset();
  std::unique_ptr<Session> fork() const;

  // Copies of the current DeltaNet state of layer `layer`: the recurrent state
  // [value_heads, key_dim, value_dim] and the conv window [kernel - 1, conv_dim].
  void deltanet_state(int layer, std::vector<float>* recurrent, std::vector<float>* conv) const;

 private:
  struct Scratch;

  // Where a chunk's tokens come from: the host, or a backend buffer (greedy decoding), and where its
  // greedy next token goes when it stays on the backend (no logits are then read back).
  struct ChunkIO {
    const int32_t* host_ids = nullptr;
    View device_ids, next_token;
  };
  void forward_chunk(const ChunkIO& io, int m, int offset, const ForwardOptions& options, HookRun& hooks,
                     ForwardResult& result);
  ForwardResult forward_calls(const int32_t* ids, int n, const ForwardOptions& options);
  void validate(const ForwardOptions& options) const;
  void apply_state_interventions(const ForwardOptions& options);
  void restore(Session& before);
  void ensure_kv_capacity(int tokens);
  Scratch& scratch(int m);

  const Model& model_;
  Backend& be_;
  int pos_ = 0;
  int kv_capacity_ = 0;
  ElemType kv_type_ = ElemType::F32;  // of the KV caches, once allocated
  std::vector<LayerState> layers_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace moelens
