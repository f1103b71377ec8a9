#include "json.h"

#include <cmath>
#include <cstdlib>

#include "error.h"

namespace moelens {

namespace {
constexpr int kMaxDepth = 64;
}

class JsonParser {
 public:
  JsonParser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  Json parse_document() {
    Json v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) error("trailing characters after the JSON value");
    return v;
  }

 private:
  std::string_view s_;
  const std::string& what_;
  size_t i_ = 0;

  [[noreturn]] void error(const char* why) { fail(what_, ": invalid JSON at byte ", i_, ": ", why); }

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  char peek() {
    if (i_ >= s_.size()) error("unexpected end of text");
    return s_[i_];
  }

  void expect_word(const char* word) {
    for (const char* p = word; *p; ++p, ++i_)
      if (i_ >= s_.size() || s_[i_] != *p) error("unknown literal");
  }

  Json parse_value(int depth) {
    if (depth > kMaxDepth) error("nesting too deep");
    skip_ws();
    Json v;
    char c = peek();
    if (c == '{') {
      v.type_ = Json::Type::Object;
      ++i_;
      skip_ws();
      if (peek() == '}') { ++i_; return v; }
      for (;;) {
        skip_ws();
        if (peek() != '"') error("expected a string key");
        std::string key = parse_string();
        skip_ws();
        if (peek() != ':') error("expected ':'");
        ++i_;
        Json item = parse_value(depth + 1);
        v.object_.emplace_back(std::move(key), std::move(item));
        skip_ws();
        char d = peek();
        ++i_;
        if (d == '}') return v;
        if (d != ',') error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.type_ = Json::Type::Array;
      ++i_;
      skip_ws();
      if (peek() == ']') { ++i_; return v; }
      for (;;) {
        v.array_.push_back(parse_value(depth + 1));
        skip_ws();
        char d = peek();
        ++i_;
        if (d == ']') return v;
        if (d != ',') error("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.type_ = Json::Type::String;
      v.string_ = parse_string();
      return v;
    }
    if (c == 't') { expect_word("true"); v.type_ = Json::Type::Bool; v.bool_ = true; return v; }
    if (c == 'f') { expect_word("false"); v.type_ = Json::Type::Bool; return v; }
    if (c == 'n') { expect_word("null"); return v; }
    // Python's json writes these for non-finite floats; accept them as numbers.
    if (c == 'N') { expect_word("NaN"); v.type_ = Json::Type::Number; v.number_ = NAN; return v; }
    if (c == 'I') { expect_word("Infinity"); v.type_ = Json::Type::Number; v.number_ = INFINITY; return v; }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    error("unexpected character");
  }

  Json parse_number() {
    size_t start = i_;
    if (s_[i_] == '-') {
      ++i_;
      if (i_ < s_.size() && s_[i_] == 'I') {
        expect_word("Infinity");
        Json v;
        v.type_ = Json::Type::Number;
        v.number_ = -INFINITY;
        return v;
      }
    }
    auto digits = [&] {
      size_t n = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_, ++n;
      return n;
    };
    if (digits() == 0) error("malformed number");
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (digits() == 0) error("malformed number");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) error("malformed number");
    }
    std::string text(s_.substr(start, i_ - start));
    Json v;
    v.type_ = Json::Type::Number;
    v.number_ = std::strtod(text.c_str(), nullptr);
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  uint32_t parse_hex4() {
    if (i_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f') v |= uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= uint32_t(h - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return v;
  }

  // Validates one UTF-8 sequence starting at i_ and copies it.
  void copy_utf8(std::string& out) {
    auto b = [&](size_t k) { return static_cast<unsigned char>(s_[k]); };
    unsigned char c = b(i_);
    int len;
    uint32_t cp;
    if (c < 0x80) { out += char(c); ++i_; return; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else error("text is not valid UTF-8");
    if (i_ + len > s_.size()) error("text is not valid UTF-8 (truncated sequence)");
    for (int k = 1; k < len; ++k) {
      if ((b(i_ + k) & 0xC0) != 0x80) error("text is not valid UTF-8");
      cp = (cp << 6) | (b(i_ + k) & 0x3F);
    }
    static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      error("text is not valid UTF-8 (overlong or out-of-range sequence)");
    out.append(s_.data() + i_, len);
    i_ += len;
  }

  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) error("unterminated string");
      char c = s_[i_];
      if (c == '"') { ++i_; return out; }
      if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
      if (c != '\\') { copy_utf8(out); continue; }
      ++i_;
      if (i_ >= s_.size()) error("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i_ + 2 > s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') error("unpaired surrogate");
            i_ += 2;
            uint32_t lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            error("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: error("unknown escape");
      }
    }
  }
};

Json Json::parse(std::string_view text, const std::string& what) { return JsonParser(text, what).parse_document(); }

const Json* Json::find(std::string_view key) const {
  if (type_ != Type::Object) return nullptr;
  for (const auto& [k, v] : object_)
    if (k == key) return &v;
  return nullptr;
}

bool Json::is_integer() const {
  return type_ == Type::Number && std::isfinite(number_) && std::floor(number_) == number_ &&
         std::fabs(number_) <= 9.0e15;
}

const char* Json::type_name(Type t) {
  switch (t) {
    case Type::Null: return "null";
    case Type::Bool: return "a boolean";
    case Type::Number: return "a number";
    case Type::String: return "a string";
    case Type::Array: return "an array";
    case Type::Object: return "an object";
  }
  return "?";
}

}  // namespace moelens
