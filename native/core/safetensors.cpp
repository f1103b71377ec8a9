#include "safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "error.h"
#include "json.h"

namespace moelens {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(path, ": cannot map: ", std::strerror(e));
    }
    // Huge pages for the weights where the kernel can: decode walks 19 GB of experts in short rows, and
    // with 4 KB pages every page is a TLB miss and a stop for the hardware prefetcher. Advice only.
    ::madvise(p, size_, MADV_HUGEPAGE);
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit is 100 MB
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const size_t size = file_.size();
  if (size < 8) fail(path, ": truncated safetensors file (", size, " bytes; the 8-byte header length is missing)");
  uint64_t header_len;
  std::memcpy(&header_len, file_.data(), 8);
  if (header_len > kMaxHeader) fail(path, ": safetensors header length ", header_len, " exceeds the 100 MB limit");
  if (header_len > size - 8)
    fail(path, ": safetensors header length ", header_len, " runs past the end of the file (", size, " bytes)");
  std::string_view header(reinterpret_cast<const char*>(file_.data() + 8), header_len);
  Json root = Json::parse(header, path + " (safetensors header)");
  if (!root.is_object()) fail(path, ": safetensors header is not a JSON object");
  const uint8_t* base = file_.data() + 8 + header_len;
  const size_t data_size = size - 8 - header_len;

  struct Range {
    size_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : root.members()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, ": __metadata__ is not an object");
      continue;
    }
    auto where = [&] { return path + ": tensor '" + name + "'"; };
    if (!entry.is_object()) fail(where(), ": header entry is not an object");
    const Json* dt = entry.find("dtype");
    const Json* sh = entry.find("shape");
    const Json* off = entry.find("data_offsets");
    if (!dt || !dt->is_string()) fail(where(), ": missing or non-string 'dtype'");
    if (!sh || !sh->is_array()) fail(where(), ": missing or non-array 'shape'");
    if (!off || !off->is_array() || off->items().size() != 2) fail(where(), ": 'data_offsets' must be [begin, end]");
    TensorView v;
    v.name = name;
    v.file = path;
    if (!parse_dtype(dt->as_string(), &v.dtype)) fail(where(), ": unknown dtype '", dt->as_string(), "'");
    if (sh->items().size() > 8) fail(where(), ": shape has more than 8 dimensions");
    uint64_t numel = 1;
    for (const Json& d : sh->items()) {
      if (!d.is_integer() || d.as_number() < 0) fail(where(), ": shape entries must be non-negative integers");
      uint64_t n = uint64_t(d.as_number());
      if (n != 0 && numel > (uint64_t(1) << 62) / n) fail(where(), ": shape is too large");
      numel *= n;
      v.shape.push_back(int64_t(n));
    }
    for (const Json& o : off->items())
      if (!o.is_integer() || o.as_number() < 0) fail(where(), ": data_offsets must be non-negative integers");
    uint64_t begin = uint64_t(off->items()[0].as_number());
    uint64_t end = uint64_t(off->items()[1].as_number());
    if (begin > end) fail(where(), ": data_offsets begin ", begin, " is after end ", end);
    if (end > data_size)
      fail(where(), ": data_offsets end ", end, " is past the end of the data section (", data_size, " bytes)");
    uint64_t want = numel * dtype_size(v.dtype);
    if (end - begin != want)
      fail(where(), ": holds ", end - begin, " bytes but dtype ", dt->as_string(), " and shape ", v.shape_str(),
           " need ", want);
    v.data = base + begin;
    v.bytes = size_t(want);
    if (tensors_.count(name)) fail(where(), ": listed twice in the header");
    auto it = tensors_.emplace(name, std::move(v)).first;
    if (end > begin) ranges.push_back({size_t(begin), size_t(end), &it->first});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end)
      fail(path, ": tensors '", *ranges[i - 1].name, "' and '", *ranges[i].name, "' overlap in the data section");
}

}  // namespace moelens
