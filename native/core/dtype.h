// Element types found in checkpoints, and the scalar conversions the core needs.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace moelens {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2 };

namespace detail {
struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};
// In enum order, so that dtype_size (called per weight row in the hot loops) and dtype_name index it.
inline constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8},  {DType::F32, "F32", 4},   {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8},  {DType::I32, "I32", 4},   {DType::I16, "I16", 2},         {DType::I8, "I8", 1},
    {DType::U64, "U64", 8},  {DType::U32, "U32", 4},   {DType::U16, "U16", 2},         {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};
constexpr bool in_enum_order() {
  for (size_t i = 0; i < sizeof(kDTypes) / sizeof(kDTypes[0]); ++i)
    if (size_t(kDTypes[i].type) != i) return false;
  return true;
}
static_assert(in_enum_order(), "kDTypes must list the DType values in order");
}  // namespace detail

// Parses a safetensors dtype name ("BF16", ...); returns false for an unknown name.
bool parse_dtype(const std::string& name, DType* out);
const char* dtype_name(DType t);
inline size_t dtype_size(DType t) { return detail::kDTypes[size_t(t)].size; }

inline float bf16_to_f32(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, as torch and MLX do.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // keep NaN a NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((man & 0x400) == 0) { man <<= 1; --exp; }
      man &= 0x3ff;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reads element i of a float tensor stored as F32, F16 or BF16.
inline float load_float(const uint8_t* base, DType t, size_t i) {
  switch (t) {
    case DType::F32: { float f; std::memcpy(&f, base + 4 * i, 4); return f; }
    case DType::F16: { uint16_t h; std::memcpy(&h, base + 2 * i, 2); return f16_to_f32(h); }
    case DType::BF16: { uint16_t h; std::memcpy(&h, base + 2 * i, 2); return bf16_to_f32(h); }
    default: return 0.f;
  }
}

inline bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

}  // namespace moelens
