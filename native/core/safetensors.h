// Memory-mapped safetensors files: header parsing and validation, zero-copy tensor views.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtype.h"

namespace moelens {

struct TensorView {
  std::string name;
  std::string file;  // path of the file that holds it, for error messages
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;

  int64_t numel() const;
  std::string shape_str() const;
};

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates the file: header length, JSON, dtypes, shapes, and that every tensor's byte range
  // lies inside the data section, matches its shape and overlaps no other tensor.
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace moelens
