// Errors raised by the core. Every message names the file, tensor or field at fault, so that a
// bad checkpoint or config is reported precisely (the binding turns these into JS Errors).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace moelens {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

}  // namespace moelens
