// The mock Objective-C runtime's core: selectors, classes, message dispatch, retain/release and
// autorelease pools (see objc_mock.h). The Metal classes are in metal_classes.cpp.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "objc_mock.h"

namespace moelens::objc_mock {

namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

struct Registry {
  std::set<std::string> selectors;
  std::map<std::string, std::unique_ptr<Class>> classes, metas;
  std::map<std::string, std::unique_ptr<Object>> class_objects;
};

Registry& registry() {
  static Registry r;
  return r;
}

Class* find_class(std::map<std::string, std::unique_ptr<Class>>& table, const std::string& name) {
  auto& c = table[name];
  if (!c) {
    c = std::make_unique<Class>();
    c->name = name;
  }
  return c.get();
}

thread_local std::vector<std::vector<Object*>> pools;

void release(Object* o) {
  if (--o->refs == 0) delete o;
}

}  // namespace

Object* class_object(const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& o = registry().class_objects[name];
  if (!o) {
    o = std::make_unique<Object>(find_class(registry().metas, name));
    o->refs = 1 << 30;  // never freed
  }
  return o.get();
}

void add_method(const char* name, const char* selector, IMP f, bool meta) {
  SEL s = sel_registerName(selector);
  std::lock_guard<std::mutex> lock(registry_mutex());
  find_class(meta ? registry().metas : registry().classes, name)->methods[s] = f;
}

const Class* instance_class(const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return find_class(registry().classes, name);
}

id autorelease(Object* o) {
  if (pools.empty()) {
    std::fprintf(stderr, "mock Objective-C runtime: -[%s autorelease] with no pool in place (leaked)\n", o->isa->name.c_str());
  } else {
    pools.back().push_back(o);
  }
  return to_id(o);
}

void register_foundation_classes();  // metal_classes.cpp

}  // namespace moelens::objc_mock

using namespace moelens::objc_mock;

namespace {

// Methods every object has.
id retain_imp(id self, SEL) {
  ++as<Object>(self)->refs;
  return self;
}
void release_imp(id self, SEL) { release(as<Object>(self)); }
id autorelease_imp(id self, SEL) { return autorelease(as<Object>(self)); }

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] { register_foundation_classes(); });
}

}  // namespace

// The runtime's C entry points stay inside this binary (hidden), so that nothing else that defines them
// can interpose.
#define MOCK_API __attribute__((visibility("hidden")))

extern "C" {

MOCK_API SEL sel_registerName(const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return reinterpret_cast<SEL>(const_cast<char*>(registry().selectors.insert(name).first->c_str()));
}

MOCK_API id objc_getClass(const char* name) {
  ensure_registered();
  return to_id(class_object(name));
}

// Called by the objc_msgSend trampoline: the implementation of `sel` for `self`'s class. A message to
// nil returns through a stub that returns zero, as in Objective-C.
MOCK_API IMP moelens_mock_objc_lookup(id self, SEL sel);
void* moelens_mock_nil_imp() { return nullptr; }

MOCK_API IMP moelens_mock_objc_lookup(id self, SEL sel) {
  if (!self) return reinterpret_cast<IMP>(&moelens_mock_nil_imp);
  const Class* c = as<Object>(self)->isa;
  static const SEL retain = sel_registerName("retain"), release = sel_registerName("release"),
                   autorelease = sel_registerName("autorelease");
  if (sel == retain) return imp(&retain_imp);
  if (sel == release) return imp(&release_imp);
  if (sel == autorelease) return imp(&autorelease_imp);
  auto it = c->methods.find(sel);
  if (it == c->methods.end()) {
    std::fprintf(stderr, "mock Objective-C runtime: %s does not implement %s\n", c->name.c_str(),
                 reinterpret_cast<const char*>(sel));
    std::abort();
  }
  return it->second;
}

MOCK_API void* objc_autoreleasePoolPush(void) {
  pools.emplace_back();
  return reinterpret_cast<void*>(pools.size());
}

MOCK_API void objc_autoreleasePoolPop(void* token) {
  while (pools.size() >= reinterpret_cast<size_t>(token)) {
    std::vector<Object*> objects = std::move(pools.back());
    pools.pop_back();
    for (Object* o : objects) release(o);
  }
}

}  // extern "C"

// objc_msgSend: keep every argument register, look the implementation up, restore, jump.
__asm__(
    ".text\n"
    ".globl objc_msgSend\n"
    ".hidden objc_msgSend\n"
    ".type objc_msgSend,@function\n"
    "objc_msgSend:\n"
    "  pushq %rdi\n  pushq %rsi\n  pushq %rdx\n  pushq %rcx\n  pushq %r8\n  pushq %r9\n"
    "  subq $136, %rsp\n"  // 8 xmm registers + 8 bytes to align the call
    "  movdqu %xmm0, 0(%rsp)\n  movdqu %xmm1, 16(%rsp)\n  movdqu %xmm2, 32(%rsp)\n  movdqu %xmm3, 48(%rsp)\n"
    "  movdqu %xmm4, 64(%rsp)\n  movdqu %xmm5, 80(%rsp)\n  movdqu %xmm6, 96(%rsp)\n  movdqu %xmm7, 112(%rsp)\n"
    "  callq moelens_mock_objc_lookup@PLT\n"
    "  movq %rax, %r11\n"
    "  movdqu 0(%rsp), %xmm0\n  movdqu 16(%rsp), %xmm1\n  movdqu 32(%rsp), %xmm2\n  movdqu 48(%rsp), %xmm3\n"
    "  movdqu 64(%rsp), %xmm4\n  movdqu 80(%rsp), %xmm5\n  movdqu 96(%rsp), %xmm6\n  movdqu 112(%rsp), %xmm7\n"
    "  addq $136, %rsp\n"
    "  popq %r9\n  popq %r8\n  popq %rcx\n  popq %rdx\n  popq %rsi\n  popq %rdi\n"
    "  jmpq *%r11\n"
    ".size objc_msgSend, .-objc_msgSend\n");
