// A tiny typed wrapper over the Objective-C runtime's C functions: enough to drive Metal from C++
// without Objective-C++ or Apple's metal-cpp. On macOS these symbols come from libobjc and
// Metal.framework; on Linux from the mock runtime (mock/objc_runtime.cpp), which implements the
// handful of classes the Metal host uses and runs kernels on the CPU emulator.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {
typedef struct objc_object* id;
typedef struct objc_selector* SEL;
id objc_getClass(const char* name);
SEL sel_registerName(const char* name);
void objc_msgSend(void);  // called through a cast to the method's exact signature
void* objc_autoreleasePoolPush(void);
void objc_autoreleasePoolPop(void* pool);
id MTLCreateSystemDefaultDevice(void);
}

namespace moelens::objc {

using NSUInteger = unsigned long;
using NSInteger = long;

struct MTLSize {
  NSUInteger width, height, depth;
};

struct NSRange {
  NSUInteger location, length;
};

// [self sel:args...] with the exact argument and return types of the method.
template <class R = id, class... A>
R msg(id self, SEL sel, A... args) {
  using Fn = R (*)(id, SEL, A...);
  return reinterpret_cast<Fn>(reinterpret_cast<void (*)()>(&objc_msgSend))(self, sel, args...);
}

inline id cls(const char* name) { return objc_getClass(name); }

// An autorelease pool for the enclosing scope (objects returned autoreleased are freed at its end).
class AutoreleasePool {
 public:
  AutoreleasePool() : pool_(objc_autoreleasePoolPush()) {}
  ~AutoreleasePool() { objc_autoreleasePoolPop(pool_); }
  AutoreleasePool(const AutoreleasePool&) = delete;
  AutoreleasePool& operator=(const AutoreleasePool&) = delete;

 private:
  void* pool_;
};

}  // namespace moelens::objc
