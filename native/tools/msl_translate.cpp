// msl-translate: the build step that turns shaders/*.metal (the portable MSL subset) into
//   kernels.h          kernel ids, binding indices by parameter name, parameter struct types (host side)
//   msl_sources.cpp    the MSL sources with local includes inlined, for newLibraryWithSource at run time
//   <file>.emu.cpp     C++ for the CPU emulator (native/backends/gpu/msl/msl.h), plus launchers
//   emu_table.cpp      the emulator's launcher table, indexed by kernel id
//   <file>.cu          CUDA (the same header), plus describers     (with --cuda)
//   cuda_table.cu      the CUDA describer table, indexed by kernel id              (with --cuda)
// It also lints the sources for what Apple's compiler rejects but C++ accepts.
//
// usage: msl-translate --out DIR [--cuda] file.metal...
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot read");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_if_changed(const std::string& path, const std::string& text) {
  std::ifstream f(path, std::ios::binary);
  if (f) {
    std::stringstream s;
    s << f.rdbuf();
    if (s.str() == text) return;  // keeps timestamps, so nothing downstream rebuilds
  }
  std::ofstream o(path, std::ios::binary);
  if (!o) throw Error(path + ": cannot write");
  o << text;
}

std::string dirname_of(const std::string& p) {
  size_t s = p.find_last_of('/');
  return s == std::string::npos ? "." : p.substr(0, s);
}

std::string stem_of(const std::string& p) {
  size_t s = p.find_last_of('/');
  std::string base = s == std::string::npos ? p : p.substr(s + 1);
  size_t d = base.find('.');
  return d == std::string::npos ? base : base.substr(0, d);
}

// A source with local includes inlined. `origin` maps each line of the result to (file, line).
struct Source {
  std::string text;
  std::vector<std::pair<std::string, int>> origin;
};

void inline_includes(const std::string& path, Source& out, std::set<std::string>& seen, bool keep_system) {
  std::string text = read_file(path);
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::string t = line;
    t.erase(0, t.find_first_not_of(" \t"));
    if (t.rfind("#include", 0) == 0) {
      size_t q = t.find('"');
      if (q != std::string::npos) {
        size_t e = t.find('"', q + 1);
        std::string inc = dirname_of(path) + "/" + t.substr(q + 1, e - q - 1);
        if (!seen.count(inc)) {
          seen.insert(inc);
          inline_includes(inc, out, seen, keep_system);
        }
        continue;
      }
      if (!keep_system) {
        if (t.find("<metal_stdlib>") == std::string::npos)
          throw Error(path + ":" + std::to_string(n) + ": only <metal_stdlib> may be included");
        continue;
      }
    }
    out.text += line + "\n";
    out.origin.push_back({path, n});
  }
}

// ---- lexer ----

enum class Tok { Ident, Number, Punct, String };
struct Token {
  Tok kind;
  std::string text;
  size_t begin, end;  // offsets in the source text
  int line;           // 0-based line in the source text
};

std::vector<Token> lex(const std::string& s) {
  std::vector<Token> toks;
  size_t i = 0;
  int line = 0;
  auto push = [&](Tok k, size_t b, size_t e) { toks.push_back({k, s.substr(b, e - b), b, e, line}); };
  bool line_start = true;
  while (i < s.size()) {
    char c = s[i];
    if (c == '\n') { ++line; ++i; line_start = true; continue; }
    if (isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    if (c == '#' && line_start) {  // preprocessor line (with continuations): not tokens
      while (i < s.size() && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\n') { ++line; i += 2; continue; }
        ++i;
      }
      continue;
    }
    line_start = false;
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      i += 2;
      while (i + 1 < s.size() && !(s[i] == '*' && s[i + 1] == '/')) { if (s[i] == '\n') ++line; ++i; }
      i += 2;
      continue;
    }
    size_t b = i;
    if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (i < s.size() && (isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
      push(Tok::Ident, b, i);
    } else if (isdigit(static_cast<unsigned char>(c)) || (c == '.' && i + 1 < s.size() && isdigit(static_cast<unsigned char>(s[i + 1])))) {
      while (i < s.size() && (isalnum(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == '_' ||
                              ((s[i] == '+' || s[i] == '-') && (s[i - 1] == 'e' || s[i - 1] == 'E'))))
        ++i;
      push(Tok::Number, b, i);
    } else if (c == '"' || c == '\'') {
      ++i;
      while (i < s.size() && s[i] != c) { if (s[i] == '\\') ++i; ++i; }
      ++i;
      push(Tok::String, b, i);
    } else {
      static const char* two[] = {"::", "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "++", "--",
                                  "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^="};
      size_t len = 1;
      for (const char* t : two)
        if (s.compare(i, 2, t) == 0) len = 2;
      i += len;
      push(Tok::Punct, b, i);
    }
  }
  return toks;
}

// ---- the parsed shader file ----

enum class ParamKind { Buffer, Params, Builtin };
struct Param {
  ParamKind kind;
  std::string type;  // as written, e.g. "device const float*" or "uint2"
  std::string name;
  int index = -1;        // buffer index
  std::string builtin;   // attribute name for builtins
  std::string struct_type;  // Params: the struct name
  size_t decl_begin, decl_end;  // the declaration without its attribute
  size_t full_begin, full_end;  // the whole parameter text
};

struct TgDecl {
  size_t begin, end;  // from `threadgroup` to `;` inclusive
  std::string type, name, dims;
};

struct Kernel {
  std::string name, file;
  std::vector<Param> params;
  std::string max_threads = "1024";  // [[max_total_threads_per_threadgroup(N)]] before `kernel` (N may be a macro)
  std::string min_resident;  // MIN_RESIDENT_THREADGROUPS(N) between that attribute and `kernel`; CUDA only
  size_t attr_begin = 0, attr_end = 0;  // the attributes' text, when present
  size_t kernel_tok_begin;  // the `kernel` keyword
  size_t kernel_tok_end;
  size_t params_begin, params_end;  // inside the parentheses
  size_t body_begin, body_end;      // `{` and one past `}`
  bool awaits = false;  // calls await_inputs() itself: CUDA waits for the previous launch there
  std::vector<TgDecl> tg;
};

struct ShaderFile {
  std::string path, stem;
  Source src;      // includes inlined, <metal_stdlib> removed
  Source metal;    // includes inlined, for the Metal runtime
  std::vector<Token> toks;
  std::vector<Kernel> kernels;
};

const std::set<std::string> kBuiltins = {
    "thread_position_in_grid", "threadgroup_position_in_grid", "thread_position_in_threadgroup",
    "thread_index_in_threadgroup", "threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid",
    "simdgroup_index_in_threadgroup", "thread_index_in_simdgroup", "simdgroups_per_threadgroup",
    "threads_per_simdgroup"};

std::string where(const ShaderFile& f, int line) {
  if (line >= 0 && size_t(line) < f.src.origin.size())
    return f.src.origin[size_t(line)].first + ":" + std::to_string(f.src.origin[size_t(line)].second);
  return f.path;
}

std::string trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t\n"));
  s.erase(s.find_last_not_of(" \t\n") + 1);
  return s;
}

// The index of the token closing the bracket opened at toks[i].
size_t matching(const std::vector<Token>& toks, size_t i) {
  const std::string open = toks[i].text;
  const std::string close = open == "(" ? ")" : open == "[" ? "]" : "}";
  int depth = 0;
  for (size_t j = i; j < toks.size(); ++j) {
    if (toks[j].kind != Tok::Punct) continue;
    if (toks[j].text == open) ++depth;
    else if (toks[j].text == close && --depth == 0) return j;
  }
  throw Error("unbalanced '" + open + "'");
}

// What Apple's compiler rejects and C++ accepts.
void lint(const ShaderFile& f) {
  const auto& t = f.toks;
  auto bad = [&](size_t i, const std::string& why) { throw Error(where(f, t[i].line) + ": " + why + " (not in the portable MSL subset)"); };
  static const std::set<std::string> banned = {"double", "virtual", "new", "delete", "goto", "throw", "try", "catch",
                                               "dynamic_cast", "typeid", "mutable", "register", "extern"};
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].kind != Tok::Ident) continue;
    if (banned.count(t[i].text)) bad(i, "'" + t[i].text + "'");
    if (t[i].text == "std" && i + 1 < t.size() && t[i + 1].text == "::") bad(i, "std::");
    if (t[i].text == "static") {
      bool function = false, constant = false;
      for (size_t j = i + 1; j < t.size(); ++j) {
        const std::string& x = t[j].text;
        if (x == "constexpr" || x == "constant") constant = true;
        if (x == "(") { function = t[j - 1].kind == Tok::Ident; break; }
        if (x == "=" || x == ";" || x == "[" || x == "{") break;
      }
      if (!function && !constant) bad(i, "a mutable static variable");
    }
  }
  for (size_t i = 0; i + 4 < t.size(); ++i)
    if (t[i].text == "(" && t[i + 1].text == "*" && t[i + 2].kind == Tok::Ident && t[i + 3].text == ")" && t[i + 4].text == "(")
      bad(i, "a function pointer");

  // Recursion: the call graph of the functions defined here must be acyclic.
  std::map<std::string, std::set<std::string>> calls;
  std::map<std::string, int> def_line;
  int depth = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].text == "{") ++depth;
    if (t[i].text == "}") --depth;
    if (depth != 0 || t[i].kind != Tok::Ident || i + 1 >= t.size() || t[i + 1].text != "(") continue;
    size_t close = matching(t, i + 1);
    if (close + 1 >= t.size() || t[close + 1].text != "{") continue;
    size_t end = matching(t, close + 1);
    std::set<std::string>& c = calls[t[i].text];
    def_line[t[i].text] = t[i].line;
    for (size_t j = close + 1; j < end; ++j)
      if (t[j].kind == Tok::Ident && j + 1 < end && t[j + 1].text == "(") c.insert(t[j].text);
    i = end;
  }
  std::map<std::string, int> state;  // 1: on the stack, 2: done
  std::vector<std::string> stack;
  std::function<void(const std::string&)> visit = [&](const std::string& fn) {
    state[fn] = 1;
    stack.push_back(fn);
    for (const std::string& g : calls[fn]) {
      if (!calls.count(g)) continue;
      if (state[g] == 1) {
        std::string cycle;
        for (auto it = std::find(stack.begin(), stack.end(), g); it != stack.end(); ++it) cycle += *it + " -> ";
        throw Error(where(f, def_line[g]) + ": recursion " + cycle + g + " (not in the portable MSL subset)");
      }
      if (state[g] == 0) visit(g);
    }
    stack.pop_back();
    state[fn] = 2;
  };
  for (auto& [fn, _] : calls)
    if (state[fn] == 0) visit(fn);
}

void parse_kernels(ShaderFile& f) {
  const auto& t = f.toks;
  const std::string& s = f.src.text;
  for (size_t i = 0; i + 3 < t.size(); ++i) {
    if (t[i].text != "kernel" || t[i + 1].text != "void" || t[i + 2].kind != Tok::Ident || t[i + 3].text != "(") continue;
    Kernel k;
    k.name = t[i + 2].text;
    k.file = f.stem;
    size_t at = i;  // one past the attribute
    if (at >= 4 && t[at - 4].text == "MIN_RESIDENT_THREADGROUPS" && t[at - 3].text == "(" && t[at - 1].text == ")") {
      k.min_resident = t[at - 2].text;
      k.attr_end = t[at - 1].end;
      at -= 4;
    }
    if (at >= 8 && t[at - 8].text == "[" && t[at - 7].text == "[" && t[at - 6].text == "max_total_threads_per_threadgroup" &&
        t[at - 5].text == "(" && t[at - 3].text == ")" && t[at - 2].text == "]" && t[at - 1].text == "]") {
      k.max_threads = t[at - 4].text;
      k.attr_begin = t[at - 8].begin;
      if (!k.attr_end) k.attr_end = t[at - 1].end;
    } else if (!k.min_resident.empty()) {
      throw Error(where(f, t[i].line) + ": kernel " + k.name + ": MIN_RESIDENT_THREADGROUPS follows [[max_total_threads_per_threadgroup(N)]]");
    }
    k.kernel_tok_begin = t[i].begin;
    k.kernel_tok_end = t[i].end;
    const size_t open = i + 3, close = matching(t, open);
    k.params_begin = t[open].end;
    k.params_end = t[close].begin;
    if (close + 1 >= t.size() || t[close + 1].text != "{") throw Error(where(f, t[i].line) + ": kernel " + k.name + " has no body");
    const size_t body = close + 1, body_close = matching(t, body);
    k.body_begin = t[body].begin;
    k.body_end = t[body_close].end;

    // Parameters: split at top-level commas.
    std::vector<std::pair<size_t, size_t>> ranges;  // token index ranges [a, b)
    size_t a = open + 1;
    int depth = 0;
    for (size_t j = open + 1; j <= close; ++j) {
      const std::string& x = t[j].text;
      if (x == "(" || x == "[") ++depth;
      if (x == ")" || x == "]") --depth;
      if ((x == "," && depth == 0) || j == close) {
        if (j > a) ranges.push_back({a, j});
        a = j + 1;
      }
    }
    for (auto [pa, pb] : ranges) {
      Param p;
      auto at = [&](const std::string& why) { return Error(where(f, t[pa].line) + ": kernel " + k.name + ": " + why); };
      size_t attr = pb;
      for (size_t j = pa; j + 1 < pb; ++j)
        if (t[j].text == "[" && t[j + 1].text == "[") { attr = j; break; }
      if (attr == pb) throw at("parameter without an attribute ([[buffer(n)]] or a builtin)");
      if (attr < pa + 2 || t[attr - 1].kind != Tok::Ident) throw at("cannot read a parameter declaration");
      p.name = t[attr - 1].text;
      p.type = trim(s.substr(t[pa].begin, t[attr - 1].begin - t[pa].begin));
      p.decl_begin = t[pa].begin;
      p.decl_end = t[attr - 1].end;
      p.full_begin = t[pa].begin;
      p.full_end = t[pb - 1].end;
      const std::string an = t[attr + 2].text;
      if (an == "buffer") {
        p.index = std::atoi(t[attr + 4].text.c_str());
        const bool ref = p.type.find('&') != std::string::npos;
        if (ref) {
          if (p.type.rfind("constant", 0) != 0) throw at(p.name + ": a by-reference buffer must be `constant T&`");
          p.kind = ParamKind::Params;
          std::string st = trim(p.type.substr(8));
          st = trim(st.substr(0, st.find('&')));
          if (st.rfind("const ", 0) == 0) st = trim(st.substr(6));
          p.struct_type = st;
        } else {
          if (p.type.rfind("device", 0) != 0 && p.type.rfind("constant", 0) != 0)
            throw at(p.name + ": a buffer must be a device or constant pointer");
          p.kind = ParamKind::Buffer;
        }
      } else if (kBuiltins.count(an)) {
        p.kind = ParamKind::Builtin;
        p.builtin = an;
      } else if (an == "threadgroup") {
        throw at(p.name + ": threadgroup parameters are not supported; declare threadgroup arrays in the kernel");
      } else {
        throw at("unknown attribute '" + an + "'");
      }
      k.params.push_back(p);
    }
    int params = 0;
    std::set<int> used;
    for (const Param& p : k.params) {
      if (p.kind == ParamKind::Builtin) continue;
      if (!used.insert(p.index).second) throw Error(where(f, t[i].line) + ": kernel " + k.name + ": buffer index " + std::to_string(p.index) + " used twice");
      if (p.index < 0 || p.index >= 31) throw Error(where(f, t[i].line) + ": kernel " + k.name + ": buffer index out of range");
      if (p.kind == ParamKind::Params) ++params;
    }
    if (params > 1) throw Error(where(f, t[i].line) + ": kernel " + k.name + ": at most one `constant T&` parameter struct");

    // await_inputs(): at most once, as a statement of the body itself (not inside a branch or loop,
    // which not every thread might reach).
    int level = 1;
    for (size_t j = body + 1; j < body_close; ++j) {
      if (t[j].text == "{") ++level;
      if (t[j].text == "}") --level;
      if (t[j].text != "await_inputs") continue;
      const bool statement = level == 1 && (t[j - 1].text == "{" || t[j - 1].text == ";" || t[j - 1].text == "}") &&
                             t[j + 1].text == "(" && t[j + 2].text == ")" && t[j + 3].text == ";";
      if (!statement) throw Error(where(f, t[j].line) + ": kernel " + k.name + ": await_inputs(); belongs at the top level of the kernel's body");
      if (k.awaits) throw Error(where(f, t[j].line) + ": kernel " + k.name + ": await_inputs() called twice");
      k.awaits = true;
    }

    // threadgroup declarations: at kernel scope only.
    int d = 0;
    for (size_t j = body; j <= body_close; ++j) {
      if (t[j].text == "{") ++d;
      if (t[j].text == "}") --d;
      if (t[j].text != "threadgroup") continue;
      if (t[j + 1].text == "_barrier") continue;
      const bool statement_start = t[j - 1].text == "{" || t[j - 1].text == ";" || t[j - 1].text == "}";
      if (!statement_start) continue;  // a pointer cast or declaration of a threadgroup pointer
      size_t semi = j;
      while (t[semi].text != ";") ++semi;
      size_t bracket = j;
      while (bracket < semi && t[bracket].text != "[") ++bracket;
      size_t name = bracket - 1;
      bool pointer = false;
      for (size_t q = j; q < name; ++q) pointer |= t[q].text == "*";
      if (pointer) continue;  // `threadgroup float* p = ...;` is a pointer, not an allocation
      if (d != 1) throw Error(where(f, t[j].line) + ": kernel " + k.name + ": threadgroup variables belong at kernel scope");
      for (size_t q = j; q < semi; ++q)
        if (t[q].text == "=") throw Error(where(f, t[j].line) + ": kernel " + k.name + ": threadgroup variables cannot be initialised");
      TgDecl g;
      g.begin = t[j].begin;
      g.end = t[semi].end;
      g.name = t[name].text;
      g.type = trim(s.substr(t[j + 1].begin, t[name].begin - t[j + 1].begin));
      g.dims = bracket < semi ? trim(s.substr(t[bracket].begin, t[semi].begin - t[bracket].begin)) : "";
      k.tg.push_back(g);
    }
    f.kernels.push_back(k);
    i = body_close;
  }
  for (size_t i = 0; i + 3 < t.size(); ++i) {  // CUDA's await_inputs() names the kernel's own argument
    if (t[i].text != "await_inputs" || t[i + 3].text == "{") continue;  // (Metal's definition: common.h)
    const bool in_kernel = std::any_of(f.kernels.begin(), f.kernels.end(),
                                       [&](const Kernel& k) { return t[i].begin > k.body_begin && t[i].begin < k.body_end; });
    if (!in_kernel) throw Error(where(f, t[i].line) + ": await_inputs() is called from a kernel's body, not from a function it calls");
  }
}

// ---- output ----

struct Edit {
  size_t begin, end;
  std::string text;
};

std::string apply(const std::string& s, std::vector<Edit> edits) {
  std::sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) { return a.begin < b.begin; });
  std::string out;
  size_t at = 0;
  for (const Edit& e : edits) {
    if (e.begin < at) throw Error("internal: overlapping edits");
    // Keep the line count, so that #line mapping stays exact after multi-line signatures are replaced.
    const auto lines = [](const std::string& x) { return std::count(x.begin(), x.end(), '\n'); };
    const std::string replaced = s.substr(e.begin, e.end - e.begin);
    std::string text = e.text;
    for (auto n = lines(text); n < lines(replaced); ++n) text += "\n";
    out += s.substr(at, e.begin - at) + text;
    at = e.end;
  }
  return out + s.substr(at);
}

// The source with #line directives where included text begins and ends, so that compiler errors
// name the .metal/.h file and line.
std::string with_lines(const ShaderFile& f, const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  std::string cur_file;
  int expect = -1;
  for (size_t n = 0; std::getline(in, line); ++n) {
    if (n < f.src.origin.size()) {
      const auto& [file, ln] = f.src.origin[n];
      if (file != cur_file || ln != expect) out += "#line " + std::to_string(ln) + " \"" + file + "\"\n";
      cur_file = file;
      expect = ln + 1;
    }
    out += line + "\n";
  }
  return out;
}

const char* kGenerated = "// Generated by msl-translate from shaders/*.metal: do not edit.\n";

// The launcher's first statement: checks the host bound every buffer the kernel reads, the parameter
// struct's size and the threadgroup size (shared by the emulator and CUDA targets).
std::string require_call(const Kernel& k) {
  std::string mask = "0u", params_index = "-1", params_size = "0";
  for (const Param& p : k.params) {
    if (p.kind == ParamKind::Buffer) mask += " | (1u << " + std::to_string(p.index) + ")";
    if (p.kind == ParamKind::Params) params_index = std::to_string(p.index), params_size = "sizeof(" + p.struct_type + ")";
  }
  return "  L.require(\"" + k.name + "\", " + mask + ", " + params_index + ", " + params_size + ", " + k.max_threads + ");\n";
}

std::string emu_file(const ShaderFile& f) {
  std::vector<Edit> edits;
  for (const Kernel& k : f.kernels) {
    if (k.attr_end) edits.push_back({k.attr_begin, k.attr_end, ""});
    edits.push_back({k.kernel_tok_begin, k.kernel_tok_end, "static"});
    for (const Param& p : k.params) edits.push_back({p.decl_end, p.full_end, ""});  // drop [[attributes]]
    for (size_t i = 0; i < k.tg.size(); ++i) {
      const TgDecl& g = k.tg[i];
      std::string t = g.type + (g.dims.empty() ? "" : " " + g.dims);
      edits.push_back({g.begin, g.end,
                       "threadgroup " + g.type + " (&" + g.name + ")" + g.dims + " = *msl_emu::threadgroup_alloc<" + t +
                           ">(" + std::to_string(i) + ");"});
    }
  }
  std::string body = with_lines(f, apply(f.src.text, edits));
  std::string o = kGenerated;
  o += "#include \"msl/msl.h\"\n\nnamespace msl_file_" + f.stem + " {\n" + body + "}  // namespace\n\n";
  for (const Kernel& k : f.kernels) {
    o += "static_assert((" + k.max_threads + ") % 32 == 0 && (" + k.max_threads + ") > 0 && (" + k.max_threads +
         ") <= 1024, \"kernel " + k.name + ": max_total_threads_per_threadgroup must be a multiple of 32 up to 1024\");\n";
    o += "void moelens_emu_" + k.name + "(const moelens::gpu::KernelLaunch& L) {\n";
    o += "  using namespace msl_file_" + f.stem + ";\n";
    o += require_call(k);
    std::string args;
    for (const Param& p : k.params) {
      if (!args.empty()) args += ", ";
      if (p.kind == ParamKind::Buffer) args += "msl_emu::device_ptr<" + p.type + ">(L.buffers[" + std::to_string(p.index) + "])";
      else if (p.kind == ParamKind::Params) args += "msl_emu::params_ref<" + p.struct_type + ">(L.params)";
      else args += "msl_emu::builtin<" + p.type + ">(ids." + p.builtin + ")";
    }
    o += "  msl_emu::run(L, \"" + k.name + "\", [&](const msl_emu::ThreadIds& ids) { " + k.name + "(" + args + "); });\n}\n\n";
  }
  return o + "#include \"msl/msl_end.h\"\n";
}

// Address-space keywords become nothing (CUDA pointers are generic), `constant` becomes `const`.
std::string cuda_file(const ShaderFile& f) {
  std::vector<Edit> edits;
  std::vector<std::pair<size_t, size_t>> kernel_spans;
  for (const Kernel& k : f.kernels) kernel_spans.push_back({k.kernel_tok_begin, k.params_end});
  auto in_signature = [&](size_t pos) {
    for (auto [a, b] : kernel_spans)
      if (pos >= a && pos < b) return true;
    return false;
  };
  std::set<size_t> tg_decl_starts;
  for (const Kernel& k : f.kernels)
    for (const TgDecl& g : k.tg) tg_decl_starts.insert(g.begin);
  for (const Token& t : f.toks) {
    if (in_signature(t.begin) || t.kind != Tok::Ident) continue;
    if (t.text == "device" || t.text == "thread") edits.push_back({t.begin, t.end, ""});
    else if (t.text == "constant") edits.push_back({t.begin, t.end, "const"});
    else if (t.text == "threadgroup") edits.push_back({t.begin, t.end, tg_decl_starts.count(t.begin) ? "__shared__" : ""});
  }
  // MSL's vector constructors are CUDA's make_ functions (CUDA's vector types have no constructors),
  // so a vector is built from all its components: `ulong2(x, y)`, not `ulong2(0)`.
  {
    static const std::set<std::string> vectors = {"float2", "float3", "float4", "int2", "int3", "int4", "uint2", "uint3",
                                                  "uint4", "ulong2", "ushort2", "ushort3", "ushort4", "uchar4"};
    const auto& t = f.toks;
    for (size_t i = 0; i + 1 < t.size(); ++i)
      if (t[i].kind == Tok::Ident && vectors.count(t[i].text) && t[i + 1].text == "(" && !in_signature(t[i].begin))
        edits.push_back({t[i].begin, t[i].end, "make_" + t[i].text});
  }
  // Helper functions become device functions: `__device__` goes at the start of each definition at
  // file scope (after a template header).
  {
    const auto& t = f.toks;
    std::set<std::string> kernel_names;
    for (const Kernel& k : f.kernels) kernel_names.insert(k.name);
    int depth = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].text == "{") ++depth;
      if (t[i].text == "}") --depth;
      if (depth != 0 || t[i].kind != Tok::Ident || i + 1 >= t.size() || t[i + 1].text != "(") continue;
      const size_t close = matching(t, i + 1);
      if (close + 1 >= t.size() || t[close + 1].text != "{") continue;
      size_t start = i;
      while (start > 0 && t[start - 1].text != ";" && t[start - 1].text != "}" && t[start - 1].text != "{") --start;
      if (t[start].text == "template") {
        int angle = 0;
        for (size_t j = start + 1; j < i; ++j) {
          if (t[j].text == "<") ++angle;
          if (t[j].text == ">" && --angle == 0) { start = j + 1; break; }
        }
      }
      if (!kernel_names.count(t[i].text)) edits.push_back({t[start].begin, t[start].begin, "__device__ "});
      i = matching(t, close + 1);
    }
  }
  for (const Kernel& k : f.kernels) {
    if (k.attr_end) edits.push_back({k.attr_begin, k.attr_end, ""});
    std::string bounds = k.max_threads + (k.min_resident.empty() ? "" : ", " + k.min_resident);
    std::string sig = "__global__ void __launch_bounds__(" + bounds + ") " + k.name + "(";
    std::string prologue;
    bool first = true;
    for (const Param& p : k.params) {
      if (p.kind == ParamKind::Builtin) {
        prologue += " const " + p.type + " " + p.name + " = msl_cuda::builtin<" + p.type + ">(msl_cuda::" + p.builtin + "());";
        continue;
      }
      if (!first) sig += ", ";
      first = false;
      if (p.kind == ParamKind::Params) {
        sig += "const " + p.struct_type + " " + p.name;
      } else {
        std::string ty = p.type;
        for (const char* as : {"device ", "constant "})
          if (ty.rfind(as, 0) == 0) ty = ty.substr(std::string(as).size());
        sig += ty + " " + p.name;
      }
    }
    sig += std::string(first ? "" : ", ") + "const uint msl_early_dependents)";
    if (!k.awaits) prologue += " msl_cuda::await_previous_kernel(msl_early_dependents);";
    // Replace everything from `kernel` through the opening brace of the body.
    edits.push_back({k.kernel_tok_begin, k.body_begin + 1, sig + " {" + prologue});
  }
  std::string body = with_lines(f, apply(f.src.text, edits));
  std::string o = kGenerated;
  o += "#include \"msl/msl.h\"\n#include \"cuda/kernel_call.h\"\n\nnamespace msl_file_" + f.stem + " {\n" + body + "}  // namespace\n\n";
  // Each kernel gets a describer: its function and argument addresses (into L, which must outlive the
  // launch call), for cudaLaunchKernel and for graph kernel nodes alike.
  for (const Kernel& k : f.kernels) {
    o += "void moelens_cuda_" + k.name + "(const moelens::gpu::KernelLaunch& L, moelens::gpu::CudaKernelCall& call) {\n";
    o += "  using namespace msl_file_" + f.stem + ";\n";
    o += require_call(k);
    o += "  call.func = reinterpret_cast<const void*>(&" + k.name + ");\n  call.count = 0;\n";
    for (const Param& p : k.params) {
      if (p.kind == ParamKind::Buffer)
        o += "  call.args[call.count++] = const_cast<void**>(&L.buffers[" + std::to_string(p.index) + "]);\n";
      else if (p.kind == ParamKind::Params)
        o += "  call.args[call.count++] = const_cast<void*>(L.params);\n";
    }
    o += "  call.args[call.count++] = &call.early_dependents;\n";
    o += "}\n\n";
  }
  return o + "#include \"msl/msl_end.h\"\n";
}

std::string kernels_header(const std::vector<ShaderFile>& files) {
  std::string o = kGenerated;
  bool has_params = false;
  for (const ShaderFile& f : files)
    for (const Kernel& k : f.kernels)
      for (const Param& p : k.params) has_params |= p.kind == ParamKind::Params;
  o += "// Kernel ids and binding indices, named after the kernels' parameters, so that host code cannot\n"
       "// bind a buffer at an index the kernel does not declare.\n#pragma once\n\n#include <cstdint>\n\n";
  if (has_params)  // the parameter structs, shared with the kernels
    o += "namespace moelens::gpu::shader {\nusing uint = unsigned int;\n#include \"params.h\"\n}  // namespace moelens::gpu::shader\n\n";
  o += "namespace moelens::gpu::kernels {\n\nenum class Id : int {\n";
  int count = 0;
  for (const ShaderFile& f : files)
    for (const Kernel& k : f.kernels) o += "  " + k.name + " = " + std::to_string(count++) + ",\n";
  o += "};\nconstexpr int kCount = " + std::to_string(count) + ";\n\n";
  o += "struct Info {\n  const char* name;\n  int file;  // index into kSourceNames\n  int params_index;  // -1: none\n  uint32_t buffer_mask;\n"
       "  uint32_t written_mask;  // the buffers it may write: device pointers to non-const data\n  int max_threads;  // per threadgroup\n"
       "  bool awaits;  // calls await_inputs(): before it reads only the model's weights\n};\n\n";
  o += "constexpr const char* kSourceNames[] = {";
  for (const ShaderFile& f : files) o += "\"" + f.stem + ".metal\", ";
  o += "};\nconstexpr int kSourceCount = " + std::to_string(files.size()) + ";\n\n";
  o += "constexpr Info kInfo[] = {\n";
  for (size_t fi = 0; fi < files.size(); ++fi)
    for (const Kernel& k : files[fi].kernels) {
      uint32_t mask = 0, written = 0;
      int pi = -1;
      for (const Param& p : k.params) {
        if (p.kind == ParamKind::Buffer) mask |= 1u << p.index;
        if (p.kind == ParamKind::Buffer && p.type.find("const") == std::string::npos) written |= 1u << p.index;
        if (p.kind == ParamKind::Params) pi = p.index;
      }
      o += "    {\"" + k.name + "\", " + std::to_string(fi) + ", " + std::to_string(pi) + ", " + std::to_string(mask) + "u, " +
           std::to_string(written) + "u, " + k.max_threads + ", " + (k.awaits ? "true" : "false") + "},\n";
    }
  o += "};\n\n";
  for (const ShaderFile& f : files)
    for (const Kernel& k : f.kernels) {
      o += "namespace " + k.name + " {\nconstexpr Id id = Id::" + k.name + ";\n";
      for (const Param& p : k.params) {
        if (p.kind == ParamKind::Builtin) continue;
        o += "constexpr int " + p.name + " = " + std::to_string(p.index) + ";\n";
        if (p.kind == ParamKind::Params) o += "using Params = shader::" + p.struct_type + ";\n";
      }
      o += "}  // namespace " + k.name + "\n";
    }
  o += "\n}  // namespace moelens::gpu::kernels\n";
  return o;
}

std::string sources_file(const std::vector<ShaderFile>& files) {
  std::string o = kGenerated;
  o += "#include \"kernels.h\"\n\nnamespace moelens::gpu::kernels {\n\n// The MSL of each file, local includes inlined.\nextern const char* const kSources[];\nconst char* const kSources[] = {\n";
  for (const ShaderFile& f : files) {
    // Raw string pieces stay below compiler limits on literal length.
    const std::string& s = f.metal.text;
    o += "    ";
    for (size_t at = 0; at < s.size(); at += 8000) o += "R\"msl(" + s.substr(at, 8000) + ")msl\"\n    ";
    o += ",\n";
  }
  o += "};\n\n}  // namespace moelens::gpu::kernels\n";
  return o;
}

std::string table_file(const std::vector<ShaderFile>& files, bool cuda) {
  std::string o = kGenerated;
  const std::string prefix = cuda ? "moelens_cuda_" : "moelens_emu_";
  const std::string sig =
      cuda ? "(const moelens::gpu::KernelLaunch&, moelens::gpu::CudaKernelCall&)" : "(const moelens::gpu::KernelLaunch&)";
  o += cuda ? "#include \"cuda/kernel_call.h\"\n" : "";
  o += "#include \"kernels.h\"\n#include \"launch.h\"\n\n";
  for (const ShaderFile& f : files)
    for (const Kernel& k : f.kernels) o += "void " + prefix + k.name + sig + ";\n";
  o += "\nnamespace moelens::gpu::kernels {\n\n";
  o += std::string("using ") + (cuda ? "CudaDescriber" : "EmuLauncher") + " = void (*)" + sig + ";\n";
  o += std::string("extern const ") + (cuda ? "CudaDescriber kCudaDescribers" : "EmuLauncher kEmuLaunchers") + "[];\n";
  o += std::string("const ") + (cuda ? "CudaDescriber kCudaDescribers" : "EmuLauncher kEmuLaunchers") + "[] = {\n";
  for (const ShaderFile& f : files)
    for (const Kernel& k : f.kernels) o += "    " + prefix + k.name + ",\n";
  o += "};\n\n}  // namespace moelens::gpu::kernels\n";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  bool cuda = false;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out_dir = argv[++i];
    else if (a == "--cuda") cuda = true;
    else if (a == "--help" || a == "-h") {
      std::puts("usage: msl-translate --out DIR [--cuda] file.metal...\n"
                "Writes kernels.h, msl_sources.cpp, <file>.emu.cpp and emu_table.cpp (and with --cuda\n"
                "<file>.cu and cuda_table.cu) into DIR, after linting the sources.");
      return 0;
    } else inputs.push_back(a);
  }
  if (out_dir.empty() || inputs.empty()) {
    std::fprintf(stderr, "usage: msl-translate --out DIR [--cuda] file.metal...\n");
    return 2;
  }
  try {
    std::sort(inputs.begin(), inputs.end());
    std::vector<ShaderFile> files;
    std::set<std::string> names;
    for (const std::string& in : inputs) {
      ShaderFile f;
      f.path = in;
      f.stem = stem_of(in);
      std::set<std::string> seen, seen2;
      inline_includes(in, f.src, seen, false);
      inline_includes(in, f.metal, seen2, true);
      f.toks = lex(f.src.text);
      lint(f);
      parse_kernels(f);
      for (const Kernel& k : f.kernels)
        if (!names.insert(k.name).second) throw Error(in + ": kernel " + k.name + " is defined twice");
      files.push_back(std::move(f));
    }
    write_if_changed(out_dir + "/kernels.h", kernels_header(files));
    write_if_changed(out_dir + "/msl_sources.cpp", sources_file(files));
    for (const ShaderFile& f : files) write_if_changed(out_dir + "/" + f.stem + ".emu.cpp", emu_file(f));
    write_if_changed(out_dir + "/emu_table.cpp", table_file(files, false));
    if (cuda) {
      for (const ShaderFile& f : files) write_if_changed(out_dir + "/" + f.stem + ".cu", cuda_file(f));
      write_if_changed(out_dir + "/cuda_table.cu", table_file(files, true));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "msl-translate: %s\n", e.what());
    return 1;
  }
  return 0;
}
