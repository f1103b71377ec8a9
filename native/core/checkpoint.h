// A checkpoint directory: config.json plus one safetensors file or a sharded set listed in
// model.safetensors.index.json. Tracks which tensors the model consumed, so that any tensor
// left over (other than the vision tower and the MTP head) is reported as an error.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "safetensors.h"

namespace moelens {

class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Returns the tensor and marks it consumed; throws when absent.
  const TensorView& take(const std::string& name);
  // Names that start with `prefix`.
  std::vector<std::string> names_with_prefix(const std::string& prefix) const;
  const std::map<std::string, const TensorView*>& all() const { return tensors_; }
  // Throws naming the first tensor that was neither consumed nor skippable.
  void check_all_consumed(const std::vector<std::string>& skipped_prefixes) const;
  size_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> tensors_;
  std::set<std::string> consumed_;
};

}  // namespace moelens
