// Edits to the forward pass itself (not to a copy of it), for one call. Positions are absolute
// sequence positions (the session's position counts from 0); an empty list means every position.
#pragma once

#include <string>
#include <vector>

namespace moelens {

// Edits that act through the router, the shared expert's scale or the recurrent state.
struct Intervention {
  enum class Kind {
    DisableExperts,  // router: these experts get probability 0; the rest renormalise
    ForceExperts,    // router: these experts are always among the top-k
    BiasExperts,     // router: add `values[i]` to the logit of experts[i] before the softmax
    ScaleShared,     // multiply the gated shared expert's output by `scale` (0 disables it)
    ScaleDeltaNetState,  // before this call, multiply the layer's recurrent state by `scale` (0 resets it
                         // and also clears the conv window)
  };
  Kind kind;
  int layer = -1;  // -1: every layer (ScaleShared, ScaleDeltaNetState)
  std::vector<int> experts;
  std::vector<int> positions;
  std::vector<float> values;  // BiasExperts: one bias per expert
  float scale = 1.0f;
};

// An edit of the value at a hook point (hook_points.h), applied where the plan taps it, before any
// capture of it and before anything downstream reads it.
struct HookEdit {
  enum class Op {
    Set,    // selected values = `values`
    Add,    // selected values += `values`
    Scale,  // selected values *= `scale`
    Zero,   // selected values = 0
    Mean,   // selected values = their mean over the positions of the call (of each forward chunk: Backend::prefill_chunk)
  };
  std::string name;  // a hook point name or pattern ("blocks.*.resid_post")
  Op op = Op::Set;
  std::vector<int> positions;  // absolute positions; empty: every position of the call
  std::vector<int> heads;      // for points shaped [heads, head_dim]: these heads' channels
  std::vector<int> channels;   // indices into the flattened per-token value (experts for router points)
  // Set / Add: one row of the selected channels (applied at every selected position), or one row per
  // listed position, in the order of `positions`.
  std::vector<float> values;
  float scale = 1.0f;
};

}  // namespace moelens
