#include "dtype.h"

namespace moelens {

namespace {
struct Entry {
  DType type;
  const char* name;
  size_t size;
};
constexpr Entry kTypes[] = {
    {DType::F64, "F64", 8},  {DType::F32, "F32", 4},   {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8},  {DType::I32, "I32", 4},   {DType::I16, "I16", 2},         {DType::I8, "I8", 1},
    {DType::U64, "U64", 8},  {DType::U32, "U32", 4},   {DType::U16, "U16", 2},         {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};
}  // namespace

bool parse_dtype(const std::string& name, DType* out) {
  for (const auto& e : kTypes)
    if (name == e.name) { *out = e.type; return true; }
  return false;
}

const char* dtype_name(DType t) {
  for (const auto& e : kTypes)
    if (e.type == t) return e.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const auto& e : kTypes)
    if (e.type == t) return e.size;
  return 0;
}

}  // namespace moelens
