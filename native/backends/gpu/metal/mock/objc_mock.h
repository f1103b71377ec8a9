// The mock Objective-C runtime (Linux x86-64 only): objects are C++ objects whose first base holds
// their class; a class is a table from selector to implementation; objc_msgSend is an assembly
// trampoline that looks the implementation up and jumps to it with the caller's registers and stack
// intact, so the host code calls it through the same casts as on macOS. Reference counting and
// autorelease pools behave as in Objective-C (manual retain/release).
#pragma once

#include <map>
#include <string>

#include "../objc.h"

namespace moelens::objc_mock {

using IMP = void (*)();

struct Class {
  std::string name;
  std::map<SEL, IMP> methods;  // instance methods, or class methods for a class object
};

struct Object {
  explicit Object(const Class* c) : isa(c) {}
  virtual ~Object() = default;
  const Class* isa;
  int refs = 1;
};

// A class object: an Object whose methods are the class methods (alloc, stringWithUTF8String:...).
Object* class_object(const char* name);
// Registers `imp` for `selector` on the class `name` (instances) or its class object (meta).
void add_method(const char* name, const char* selector, IMP imp, bool meta = false);
const Class* instance_class(const char* name);

template <class T>
T* as(id self) {
  return static_cast<T*>(reinterpret_cast<Object*>(self));
}
inline id to_id(Object* o) { return reinterpret_cast<id>(o); }

// Adds an object to the innermost autorelease pool; returns it.
id autorelease(Object* o);

template <class F>
IMP imp(F f) {
  return reinterpret_cast<IMP>(f);
}

}  // namespace moelens::objc_mock
