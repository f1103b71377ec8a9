// The MSL emulator's scheduler: every GPU thread of a threadgroup is a fiber with its own stack. A fiber
// runs until it reaches a threadgroup barrier or a simdgroup collective (or returns); when no fiber
// can run, the scheduler releases one simdgroup whose 32 lanes all wait at the same collective
// (computing the collective), or the threadgroup when every thread waits at the same barrier. Anything
// else is an error: a barrier or collective not reached by every thread, two call sites, or a deadlock.
// Released one at a time, in the order's simdgroup order (the first ready one; a random one in random
// order), a simdgroup runs ahead of the others up to its next barrier, as a GPU's simdgroups may: so a
// threadgroup memory word written by one simdgroup and used by another without a barrier between
// them takes a different value in one of the orders.
#if defined(__APPLE__)
#define _XOPEN_SOURCE 700  // macOS keeps the (deprecated) ucontext functions behind this
#endif
#include "emulator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "../msl/msl.h"
#include "../msl/msl_end.h"

// Fibers switch with a few instructions of assembly on x86-64 ELF (Linux), with ucontext elsewhere.
#if defined(__x86_64__) && defined(__ELF__)
#define MSL_EMU_ASM_SWITCH 1
#else
#define MSL_EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

namespace msl_emu {

namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kThreadgroupMemory = 32 * 1024;
constexpr int kSimdWidth = 32;

#if MSL_EMU_ASM_SWITCH
// Saves the callee-saved registers on the current stack, stores the stack pointer in *from, switches
// to `to` and restores its registers. A new fiber's stack starts with fiber_entry's address and the
// argument in r12 and the function in r13.
extern "C" void msl_emu_switch(void** from, void* to);
extern "C" void msl_emu_fiber_entry();
__asm__(
    ".text\n"
    ".globl msl_emu_switch\n"
    ".type msl_emu_switch,@function\n"
    "msl_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size msl_emu_switch, .-msl_emu_switch\n"
    ".globl msl_emu_fiber_entry\n"
    ".type msl_emu_fiber_entry,@function\n"
    "msl_emu_fiber_entry:\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    ".size msl_emu_fiber_entry, .-msl_emu_fiber_entry\n");
#endif

enum class State { Runnable, AtBarrier, AtCollective, AtAwait, Done };

struct Fiber {
  char* stack = nullptr;  // kStackBytes, with a guard page below
#if MSL_EMU_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  State state = State::Done;
  ThreadIds ids;
  int line = 0;
  const char* file = "";
  SimdOp op = SimdOp::Sum;
  ValueType type = ValueType::F32;
  uint32_t value = 0, arg = 0, result = 0;
  std::string error;
};

struct Scheduler;
thread_local Scheduler* tls_scheduler = nullptr;
thread_local Order tls_order = Order::Forward;
thread_local uint64_t tls_seed = 1;
thread_local const char* tls_kernel = nullptr;
thread_local std::vector<Span> tls_in_flight;  // set_pre_wait_check's, for the next run()

struct Scheduler {
  std::vector<std::unique_ptr<Fiber>> fibers;
  Fiber* current = nullptr;
#if MSL_EMU_ASM_SWITCH
  void* main_sp = nullptr;
#else
  ucontext_t main_ctx;
#endif
  const std::function<void(const ThreadIds&)>* body = nullptr;
  alignas(64) unsigned char tg_memory[kThreadgroupMemory];
  std::vector<std::pair<size_t, size_t>> tg_sites;  // (offset, bytes) per site; bytes 0 = not yet placed
  size_t tg_used = 0;
  std::mt19937_64 rng;
  // The pre-wait check of the threadgroup running now: the in-flight spans' contents while they hold
  // poison (empty when they do not).
  std::vector<std::vector<unsigned char>> saved;

  void poison(const std::vector<Span>& spans) {
    saved.resize(spans.size());
    for (size_t i = 0; i < spans.size(); ++i) {
      saved[i].assign(spans[i].data, spans[i].data + spans[i].bytes);
      std::memset(spans[i].data, 0xff, spans[i].bytes);
    }
  }
  void restore(const std::vector<Span>& spans) {  // last first: spans of one buffer may overlap
    for (size_t i = saved.size(); i-- > 0;) std::memcpy(spans[i].data, saved[i].data(), spans[i].bytes);
    saved.clear();
  }

  ~Scheduler() {
    for (auto& f : fibers)
      if (f->stack) munmap(f->stack - sysconf(_SC_PAGESIZE), kStackBytes + sysconf(_SC_PAGESIZE));
  }

  void yield_to_scheduler() {
#if MSL_EMU_ASM_SWITCH
    msl_emu_switch(&current->sp, main_sp);
#else
    swapcontext(&current->ctx, &main_ctx);
#endif
  }
  void resume(Fiber* f) {
    current = f;
#if MSL_EMU_ASM_SWITCH
    msl_emu_switch(&main_sp, f->sp);
#else
    swapcontext(&main_ctx, &f->ctx);
#endif
    current = nullptr;
  }

  static void fiber_main(Fiber* f) {
    Scheduler* s = tls_scheduler;
    try {
      (*s->body)(f->ids);
    } catch (const std::exception& e) {
      f->error = e.what();
    }
    f->state = State::Done;
    s->yield_to_scheduler();
    __builtin_trap();  // a finished fiber is never resumed
  }

  Fiber& fiber(size_t i) {
    while (fibers.size() <= i) fibers.push_back(std::make_unique<Fiber>());
    Fiber& f = *fibers[i];
    if (!f.stack) {
      const size_t page = size_t(sysconf(_SC_PAGESIZE));
      void* m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) throw Error("emulator: cannot map a fiber stack");
      mprotect(m, page, PROT_NONE);  // overflow faults instead of corrupting the next stack
      f.stack = static_cast<char*>(m) + page;
    }
    return f;
  }

  void start(Fiber& f) {
    f.state = State::Runnable;
    f.error.clear();
#if MSL_EMU_ASM_SWITCH
    void** sp = reinterpret_cast<void**>(f.stack + kStackBytes);
    *--sp = reinterpret_cast<void*>(&msl_emu_fiber_entry);
    *--sp = nullptr;                                                       // rbp
    *--sp = nullptr;                                                       // rbx
    *--sp = &f;                                                            // r12: the argument
    *--sp = reinterpret_cast<void*>(&Scheduler::fiber_main);               // r13: the function
    *--sp = nullptr;                                                       // r14
    *--sp = nullptr;                                                       // r15
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, reinterpret_cast<void (*)()>(&Scheduler::fiber_main), 1, &f);
#endif
  }
};

std::string describe_site(const Fiber& f) {
  const char* base = std::strrchr(f.file, '/');
  return std::string(base ? base + 1 : f.file) + ":" + std::to_string(f.line);
}

const char* op_name(SimdOp op) {
  static const char* names[] = {"simd_sum", "simd_product", "simd_min", "simd_max", "simd_and", "simd_or", "simd_xor",
                                "simd_shuffle", "simd_shuffle_down", "simd_shuffle_up", "simd_shuffle_xor",
                                "simd_broadcast", "simd_prefix_exclusive_sum", "simd_prefix_inclusive_sum",
                                "simd_all", "simd_any", "simdgroup_barrier",
                                "simdgroup matrix operation"};
  return names[int(op)];
}

template <class T>
T combine(SimdOp op, T a, T b) {
  switch (op) {
    case SimdOp::Sum: case SimdOp::PrefixExclusiveSum: case SimdOp::PrefixInclusiveSum: return a + b;
    case SimdOp::Product: return a * b;
    case SimdOp::Min: return std::min(a, b);
    case SimdOp::Max: return std::max(a, b);
    default: return a;
  }
}

template <class T>
void compute_collective_typed(Fiber** lanes, SimdOp op) {
  T v[kSimdWidth];
  for (int i = 0; i < kSimdWidth; ++i) v[i] = from_bits<T>(lanes[i]->value);
  auto out = [&](int i, T r) { lanes[i]->result = to_bits(r); };
  switch (op) {
    case SimdOp::Sum: case SimdOp::Product: case SimdOp::Min: case SimdOp::Max: {
      T acc = v[0];
      for (int i = 1; i < kSimdWidth; ++i) acc = combine(op, acc, v[i]);
      for (int i = 0; i < kSimdWidth; ++i) out(i, acc);
      break;
    }
    case SimdOp::PrefixExclusiveSum: case SimdOp::PrefixInclusiveSum: {
      T acc = T(0);
      for (int i = 0; i < kSimdWidth; ++i) {
        if (op == SimdOp::PrefixInclusiveSum) acc = acc + v[i];
        out(i, acc);
        if (op == SimdOp::PrefixExclusiveSum) acc = acc + v[i];
      }
      break;
    }
    default: break;
  }
}

// Computes the results of one collective reached by all 32 lanes; returns an error text or "".
std::string compute_collective(Fiber** lanes) {
  const SimdOp op = lanes[0]->op;
  const ValueType type = lanes[0]->type;
  for (int i = 1; i < kSimdWidth; ++i)
    if (lanes[i]->type != type) return std::string(op_name(op)) + " called with different argument types across lanes";
  switch (op) {
    case SimdOp::Barrier:
      break;
    case SimdOp::Uniform:  // a simdgroup matrix operation: every lane passes the same arguments
      for (int i = 0; i < kSimdWidth; ++i) {
        if (lanes[i]->value != lanes[0]->value)
          return std::string(op_name(op)) + " with arguments (pointer, elements per row, origin, transpose) that differ "
                 "between lane 0 and lane " + std::to_string(i);
        lanes[i]->result = uint32_t(i);
      }
      break;
    case SimdOp::Sum: case SimdOp::Product: case SimdOp::Min: case SimdOp::Max:
    case SimdOp::PrefixExclusiveSum: case SimdOp::PrefixInclusiveSum:
      if (type == ValueType::F32) compute_collective_typed<float>(lanes, op);
      else if (type == ValueType::I32) compute_collective_typed<int>(lanes, op);
      else compute_collective_typed<uint32_t>(lanes, op);
      break;
    case SimdOp::And: case SimdOp::Or: case SimdOp::Xor: case SimdOp::All: case SimdOp::Any: {
      uint32_t acc = lanes[0]->value;
      for (int i = 1; i < kSimdWidth; ++i) {
        const uint32_t x = lanes[i]->value;
        acc = op == SimdOp::And || op == SimdOp::All ? (acc & x) : op == SimdOp::Xor ? (acc ^ x) : (acc | x);
      }
      for (int i = 0; i < kSimdWidth; ++i) lanes[i]->result = acc;
      break;
    }
    case SimdOp::Broadcast: {
      const uint32_t src = lanes[0]->arg;
      for (int i = 1; i < kSimdWidth; ++i)
        if (lanes[i]->arg != src) return "simd_broadcast with a lane index that differs across lanes";
      if (src >= kSimdWidth) return "simd_broadcast from lane " + std::to_string(src);
      for (int i = 0; i < kSimdWidth; ++i) lanes[i]->result = lanes[src]->value;
      break;
    }
    case SimdOp::Shuffle: case SimdOp::ShuffleDown: case SimdOp::ShuffleUp: case SimdOp::ShuffleXor:
      for (int i = 0; i < kSimdWidth; ++i) {
        const int a = int(lanes[i]->arg);
        int src = op == SimdOp::Shuffle ? a : op == SimdOp::ShuffleDown ? i + a : op == SimdOp::ShuffleUp ? i - a : (i ^ a);
        if (op == SimdOp::Shuffle && (a < 0 || a >= kSimdWidth))
          return "simd_shuffle from lane " + std::to_string(a);
        if (op == SimdOp::ShuffleXor && a >= kSimdWidth) return "simd_shuffle_xor with mask " + std::to_string(a);
        if (src < 0 || src >= kSimdWidth) src = i;  // MSL: out-of-range lanes keep their own value
        lanes[i]->result = lanes[src]->value;
      }
      break;
  }
  return "";
}

std::string thread_name(const Fiber& f) {
  std::ostringstream s;
  const ThreadIds& t = f.ids;
  s << "threadgroup (" << t.threadgroup_position_in_grid.x << "," << t.threadgroup_position_in_grid.y << ","
    << t.threadgroup_position_in_grid.z << ") thread " << t.thread_index_in_threadgroup;
  return s.str();
}

// Runs one threadgroup of `count` fibers to completion; throws Error on a rule broken.
void run_threadgroup(Scheduler& s, size_t count, const char* kernel) {
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = tls_order == Order::Reverse ? count - 1 - i : i;
  std::vector<size_t> sg_order(count / kSimdWidth);  // simdgroups in the order's order
  for (size_t g = 0; g < sg_order.size(); ++g) sg_order[g] = tls_order == Order::Reverse ? sg_order.size() - 1 - g : g;
  std::memset(s.tg_memory, 0xff, sizeof s.tg_memory);  // NaN poison: reading before writing shows
  s.tg_used = 0;
  for (auto& site : s.tg_sites) site = {0, 0};
  for (size_t i = 0; i < count; ++i) s.start(*s.fibers[i]);

  auto fail = [&](const Fiber& f, const std::string& why) {
    throw Error(std::string("kernel ") + kernel + ": " + thread_name(f) + ": " + why);
  };
  for (;;) {
    if (tls_order == Order::Random) std::shuffle(order.begin(), order.end(), s.rng);
    for (size_t i : order) {
      Fiber& f = *s.fibers[i];
      if (f.state != State::Runnable) continue;
      s.resume(&f);
      if (!f.error.empty()) fail(f, f.error);
    }
    // Every fiber waits or is done. Release one simdgroup whose lanes all wait at one collective: the
    // first in the order's simdgroup order.
    bool progress = false;
    if (tls_order == Order::Random) std::shuffle(sg_order.begin(), sg_order.end(), s.rng);
    for (size_t g : sg_order) {
      Fiber* lanes[kSimdWidth];
      int at_collective = 0;
      for (int l = 0; l < kSimdWidth; ++l) {
        lanes[l] = s.fibers[g * kSimdWidth + size_t(l)].get();
        at_collective += lanes[l]->state == State::AtCollective;
      }
      if (at_collective == 0) continue;
      for (int l = 0; l < kSimdWidth; ++l) {
        const Fiber& f = *lanes[l];
        const Fiber& first = **std::find_if(lanes, lanes + kSimdWidth, [](Fiber* x) { return x->state == State::AtCollective; });
        if (f.state == State::Done)
          fail(first, std::string(op_name(first.op)) + " at " + describe_site(first) + " is not reached by lane " +
                          std::to_string(l) + " of its simdgroup (it returned): collectives need all 32 lanes");
        if (f.state == State::AtBarrier)
          fail(first, std::string(op_name(first.op)) + " at " + describe_site(first) + " while lane " + std::to_string(l) +
                          " waits at the barrier at " + describe_site(f) + ": collectives need uniform control flow");
        if (f.line != first.line || std::strcmp(f.file, first.file) != 0 || f.op != first.op)
          fail(first, std::string(op_name(first.op)) + " at " + describe_site(first) + " while lane " + std::to_string(l) +
                          " is at " + op_name(f.op) + " at " + describe_site(f) + ": collectives need uniform control flow");
      }
      const std::string err = compute_collective(lanes);
      if (!err.empty()) fail(*lanes[0], err + " at " + describe_site(*lanes[0]));
      for (Fiber* f : lanes) f->state = State::Runnable;
      progress = true;
      break;
    }
    if (progress) continue;
    // The pre-wait check's await_inputs(): once every thread that has not returned waits there, the
    // in-flight buffers get their contents back and the threads go on.
    const Fiber* awaiting = nullptr;
    for (size_t i = 0; i < count && !awaiting; ++i)
      if (s.fibers[i]->state == State::AtAwait) awaiting = s.fibers[i].get();
    if (awaiting) {
      for (size_t i = 0; i < count; ++i) {
        const Fiber& f = *s.fibers[i];
        if (f.state == State::AtBarrier)
          fail(*awaiting, "await_inputs() at " + describe_site(*awaiting) + " while thread " +
                              std::to_string(f.ids.thread_index_in_threadgroup) + " waits at the barrier at " +
                              describe_site(f));
      }
      s.restore(tls_in_flight);
      for (size_t i = 0; i < count; ++i)
        if (s.fibers[i]->state == State::AtAwait) s.fibers[i]->state = State::Runnable;
      continue;
    }
    // Then the barrier: every thread must wait at the same one.
    const Fiber* waiting = nullptr;
    const Fiber* done = nullptr;
    for (size_t i = 0; i < count; ++i) {
      const Fiber& f = *s.fibers[i];
      if (f.state == State::AtBarrier && !waiting) waiting = &f;
      if (f.state == State::Done && !done) done = &f;
    }
    if (!waiting) return;  // all done
    if (done)
      fail(*waiting, "threadgroup_barrier at " + describe_site(*waiting) + " is not reached by thread " +
                         std::to_string(done->ids.thread_index_in_threadgroup) + " (it returned)");
    for (size_t i = 0; i < count; ++i) {
      Fiber& f = *s.fibers[i];
      if (f.line != waiting->line || std::strcmp(f.file, waiting->file) != 0)
        fail(*waiting, "threadgroup_barrier at " + describe_site(*waiting) + " while thread " +
                           std::to_string(f.ids.thread_index_in_threadgroup) + " waits at the barrier at " +
                           describe_site(f) + ": barriers need uniform control flow");
      f.state = State::Runnable;
    }
  }
}

}  // namespace

void misaligned_vector(uintptr_t address, size_t alignment) {
  throw Error("vector access at address " + std::to_string(address) + ", which is not aligned to " +
              std::to_string(alignment) + " bytes");
}

void wrong_lane(uint32_t passed, uint32_t lane) {
  throw Error("simdgroup call given lane " + std::to_string(passed) + " by the thread in lane " + std::to_string(lane));
}

const char* order_name(Order o) { return o == Order::Forward ? "forward" : o == Order::Reverse ? "reverse" : "random"; }

bool parse_order(const std::string& name, Order* out) {
  for (Order o : {Order::Forward, Order::Reverse, Order::Random})
    if (name == order_name(o)) return *out = o, true;
  return false;
}

void set_order(Order order, uint64_t seed) {
  tls_order = order;
  tls_seed = seed;
}

Order current_order() { return tls_order; }

const char* running_kernel() { return tls_kernel; }

uint32_t simd_collective(SimdOp op, ValueType type, uint32_t value, uint32_t arg, int line, const char* file) {
  Scheduler* s = tls_scheduler;
  Fiber* f = s->current;
  f->state = State::AtCollective;
  f->op = op;
  f->type = type;
  f->value = value;
  f->arg = arg;
  f->line = line;
  f->file = file;
  s->yield_to_scheduler();
  return f->result;
}

void await_inputs_at(int line, const char* file) {
  Scheduler* s = tls_scheduler;
  if (s->saved.empty()) return;  // no check, or this threadgroup's buffers hold their contents already
  Fiber* f = s->current;
  f->state = State::AtAwait;
  f->line = line;
  f->file = file;
  s->yield_to_scheduler();
}

void set_pre_wait_check(std::vector<Span> in_flight) { tls_in_flight = std::move(in_flight); }

void threadgroup_barrier_at(int line, const char* file) {
  Scheduler* s = tls_scheduler;
  Fiber* f = s->current;
  f->state = State::AtBarrier;
  f->line = line;
  f->file = file;
  s->yield_to_scheduler();
}

void* threadgroup_alloc_bytes(int site, size_t bytes, size_t align) {
  Scheduler* s = tls_scheduler;
  if (size_t(site) >= s->tg_sites.size()) s->tg_sites.resize(size_t(site) + 1, {0, 0});
  auto& slot = s->tg_sites[size_t(site)];
  if (slot.second == 0) {
    const size_t at = (s->tg_used + align - 1) / align * align;
    if (at + bytes > kThreadgroupMemory)
      throw Error("threadgroup memory of " + std::to_string(at + bytes) + " bytes exceeds the 32 KiB limit");
    slot = {at, bytes};
    s->tg_used = at + bytes;
  }
  return s->tg_memory + slot.first;
}

void run(const moelens::gpu::KernelLaunch& L, const char* kernel, const std::function<void(const ThreadIds&)>& thread) {
  const uint32_t tx = L.threads[0], ty = L.threads[1], tz = L.threads[2];
  const size_t count = size_t(tx) * ty * tz;
  if (count == 0 || count > 1024)
    throw Error(std::string("kernel ") + kernel + ": threadgroup of " + std::to_string(count) + " threads (1..1024)");
  if (count % kSimdWidth != 0)
    throw Error(std::string("kernel ") + kernel + ": threadgroup of " + std::to_string(count) +
                " threads is not a multiple of 32 (the portable subset's simdgroup width)");
  static thread_local std::unique_ptr<Scheduler> scheduler;
  if (!scheduler) scheduler = std::make_unique<Scheduler>();
  Scheduler& s = *scheduler;
  s.rng.seed(tls_seed);
  s.body = &thread;
  for (size_t i = 0; i < count; ++i) s.fiber(i);
  tls_scheduler = &s;
  tls_kernel = kernel;
  struct Reset {
    Scheduler& s;
    ~Reset() {
      s.restore(tls_in_flight);  // a launch that stopped on an error before its await_inputs()
      tls_in_flight.clear();     // for this run() only
      tls_scheduler = nullptr;
      tls_kernel = nullptr;
    }
  } reset{s};

  const uint32_t gx = L.grid[0], gy = L.grid[1], gz = L.grid[2];
  const size_t groups = size_t(gx) * gy * gz;
  std::vector<size_t> group_order(groups);
  for (size_t i = 0; i < groups; ++i) group_order[i] = tls_order == Order::Reverse ? groups - 1 - i : i;
  if (tls_order == Order::Random) std::shuffle(group_order.begin(), group_order.end(), s.rng);
  const uint32_t simdgroups = uint32_t(count / kSimdWidth);
  bool first = true;
  for (size_t gi : group_order) {
    const uint3 group(uint32_t(gi % gx), uint32_t(gi / gx % gy), uint32_t(gi / (size_t(gx) * gy)));
    for (size_t i = 0; i < count; ++i) {
      ThreadIds& t = s.fibers[i]->ids;
      const uint3 local(uint32_t(i % tx), uint32_t(i / tx % ty), uint32_t(i / (size_t(tx) * ty)));
      t.thread_position_in_threadgroup = local;
      t.threadgroup_position_in_grid = group;
      t.threads_per_threadgroup = uint3(tx, ty, tz);
      t.threadgroups_per_grid = uint3(gx, gy, gz);
      t.threads_per_grid = uint3(gx * tx, gy * ty, gz * tz);
      t.thread_position_in_grid = uint3(group.x * tx + local.x, group.y * ty + local.y, group.z * tz + local.z);
      t.thread_index_in_threadgroup = uint32_t(i);
      t.simdgroup_index_in_threadgroup = uint32_t(i / kSimdWidth);
      t.thread_index_in_simdgroup = uint32_t(i % kSimdWidth);
      t.simdgroups_per_threadgroup = simdgroups;
      t.threads_per_simdgroup = kSimdWidth;
    }
    if (first && !tls_in_flight.empty()) s.poison(tls_in_flight);
    first = false;
    run_threadgroup(s, count, kernel);
    s.restore(tls_in_flight);  // every thread returned before await_inputs()
  }
}

}  // namespace msl_emu
