#include "dtype.h"

namespace moelens {

bool parse_dtype(const std::string& name, DType* out) {
  for (const auto& e : detail::kDTypes)
    if (name == e.name) { *out = e.type; return true; }
  return false;
}

const char* dtype_name(DType t) { return detail::kDTypes[size_t(t)].name; }

}  // namespace moelens
