#include "checkpoint.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "error.h"
#include "json.h"

namespace moelens {

namespace {
bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  if (file_exists(index_path)) {
    Json index = Json::parse(read_text(index_path), index_path);
    const Json* wm = index.find("weight_map");
    if (!wm || !wm->is_object()) fail(index_path, ": missing object field 'weight_map'");
    for (const auto& [tensor, file] : wm->members()) {
      if (!file.is_string()) fail(index_path, ": weight_map entry '", tensor, "' is not a file name");
      const std::string& f = file.as_string();
      if (f.empty() || f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        fail(index_path, ": weight_map entry '", tensor, "' names an invalid file '", f, "'");
      weight_map[tensor] = f;
      bool seen = false;
      for (const auto& s : shard_names) seen |= s == f;
      if (!seen) shard_names.push_back(f);
    }
    if (shard_names.empty()) fail(index_path, ": weight_map is empty");
  } else if (file_exists(dir + "/model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else {
    fail(dir, ": no model.safetensors or model.safetensors.index.json found");
  }

  for (const auto& name : shard_names) {
    files_.push_back(std::make_unique<SafetensorsFile>(dir + "/" + name));
    const SafetensorsFile& file = *files_.back();
    for (const auto& [tname, view] : file.tensors()) {
      auto it = tensors_.find(tname);
      if (it != tensors_.end())
        fail(file.path(), ": tensor '", tname, "' also appears in ", it->second->file);
      if (!weight_map.empty()) {
        auto wm = weight_map.find(tname);
        if (wm == weight_map.end() || wm->second != name)
          fail(file.path(), ": tensor '", tname, "' is not listed for this file in ", index_path);
      }
      tensors_[tname] = &view;
    }
  }
  for (const auto& [tname, file] : weight_map)
    if (!tensors_.count(tname)) fail(dir, "/", file, ": tensor '", tname, "' listed in the index is missing");
}

const TensorView& Checkpoint::take(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(dir_, ": missing tensor '", name, "'");
  consumed_.insert(name);
  return *it->second;
}

std::vector<std::string> Checkpoint::names_with_prefix(const std::string& prefix) const {
  std::vector<std::string> out;
  for (auto it = tensors_.lower_bound(prefix); it != tensors_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    out.push_back(it->first);
  return out;
}

void Checkpoint::check_all_consumed(const std::vector<std::string>& skipped_prefixes) const {
  for (const auto& [name, view] : tensors_) {
    if (consumed_.count(name)) continue;
    bool skipped = false;
    for (const auto& p : skipped_prefixes) skipped |= name.compare(0, p.size(), p) == 0;
    if (!skipped) fail(view->file, ": unexpected tensor '", name, "' (not part of the text model this config describes)");
  }
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, view] : tensors_) n += view->bytes;
  return n;
}

}  // namespace moelens
