// A strict, bounded JSON reader for config files and safetensors headers.
// Written here (not a dependency) because the core must build with nothing but a C++17 compiler on
// Linux, macOS and GPU hosts without Node, and because header parsing has to survive fuzzed input: it
// enforces a nesting limit, validates UTF-8 and never reads past the given text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moelens {

class Json {
 public:
  enum class Type { Null, Bool, Number, String, Array, Object };

  // Parses `text`; on failure throws Error("<what>: invalid JSON at byte N: reason").
  static Json parse(std::string_view text, const std::string& what);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_bool() const { return type_ == Type::Bool; }
  bool is_number() const { return type_ == Type::Number; }
  bool is_string() const { return type_ == Type::String; }
  bool is_array() const { return type_ == Type::Array; }
  bool is_object() const { return type_ == Type::Object; }

  bool as_bool() const { return bool_; }
  double as_number() const { return number_; }
  const std::string& as_string() const { return string_; }
  const std::vector<Json>& items() const { return array_; }
  const std::vector<std::pair<std::string, Json>>& members() const { return object_; }

  // Object member lookup; nullptr when absent or when this is not an object.
  const Json* find(std::string_view key) const;
  // True when the number is an integer that fits in int64.
  bool is_integer() const;

  static const char* type_name(Type t);

 private:
  friend class JsonParser;
  Type type_ = Type::Null;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> array_;
  std::vector<std::pair<std::string, Json>> object_;
};

}  // namespace moelens
