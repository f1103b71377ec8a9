// Edits to the forward pass itself (not to a copy of it), for one call. Positions are absolute
// sequence positions (the session's position counts from 0); an empty list means every position.
#pragma once

#include <string>
#include <vector>

namespace moelens {

struct Intervention {
  enum class Kind {
    DisableExperts,  // router: these experts get probability 0; the rest renormalise
    ForceExperts,    // router: these experts are always among the top-k
    ScaleShared,     // multiply the gated shared expert's output by `scale` (0 disables it)
    Steer,           // add scale * vector to the residual stream after `layer`
    PatchResidual,   // replace the residual stream after `layer` at `positions` with `vector` rows
    ScaleDeltaNetState,  // before this call, multiply the layer's recurrent state by `scale` (0 resets it
                         // and also clears the conv window)
  };
  Kind kind;
  int layer = -1;  // -1: every layer (ScaleShared, ScaleDeltaNetState)
  std::vector<int> experts;
  std::vector<int> positions;
  std::vector<float> vector;  // Steer: [hidden]; PatchResidual: [positions, hidden]
  float scale = 1.0f;
};

}  // namespace moelens
