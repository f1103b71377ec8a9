// moelens-emu-selftest: the emulator's own checks, on kernels that break the portable subset's rules
// (broken.metal): each must be reported (or, for a missing barrier, give a wrong result in some thread
// order), and the collectives and simdgroup matrices must compute what MSL specifies. Exits 1 on the first check that fails.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "emulator/emulator.h"
#include "kernels.h"
#include "launch.h"

namespace moelens::gpu::kernels {
using EmuLauncher = void (*)(const KernelLaunch&);
extern const EmuLauncher kEmuLaunchers[];
}  // namespace moelens::gpu::kernels

namespace {

using moelens::gpu::KernelLaunch;
namespace k = moelens::gpu::kernels;

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Runs kernel `id` on one threadgroup of `threads`; returns the error message ("" when none).
std::string launch(k::Id id, uint32_t threads, std::vector<float>& out, msl_emu::Order order) {
  KernelLaunch L;
  L.buffers[0] = out.data();
  L.threads[0] = threads;
  msl_emu::set_order(order, 7);
  try {
    k::kEmuLaunchers[int(id)](L);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

int main() {
  using msl_emu::Order;
  std::vector<float> out(256, 0.0f);

  // A missing barrier: hidden in forward order, exposed in reverse and random order.
  auto correct = [&] {
    for (int i = 0; i < 64; ++i)
      if (out[size_t(i)] != (i > 0 ? float(i - 1) : 0.0f)) return false;
    return true;
  };
  check(launch(k::Id::missing_barrier, 64, out, Order::Forward).empty() && correct(),
        "missing barrier: forward order happens to be right");
  check(launch(k::Id::missing_barrier, 64, out, Order::Reverse).empty() && !correct(),
        "missing barrier: reverse order reads the NaN poison");
  for (Order o : {Order::Forward, Order::Reverse, Order::Random})
    check(launch(k::Id::with_barrier, 64, out, o).empty() && correct(),
          std::string("with the barrier: right in ") + msl_emu::order_name(o) + " order");

  // A simdgroup runs ahead of the others up to its next barrier, so a word shared across simdgroups
  // without a barrier takes a different value in forward and in reverse order.
  check(launch(k::Id::missing_barrier_across_simdgroups, 64, out, Order::Forward).empty() && out[0] == 1.0f,
        "missing barrier across simdgroups: simdgroup 0 runs ahead in forward order and reads the old word");
  check(launch(k::Id::missing_barrier_across_simdgroups, 64, out, Order::Reverse).empty() && out[0] == 2.0f,
        "missing barrier across simdgroups: simdgroup 1 runs ahead in reverse order and simdgroup 0 reads the new word");

  // The pre-wait check: what launches in flight write holds poison up to await_inputs().
  for (int i = 0; i < 64; ++i) out[size_t(i)] = float(i);
  auto read_early = [&](bool checked) {
    if (checked) msl_emu::set_pre_wait_check({{reinterpret_cast<unsigned char*>(out.data()), 64 * sizeof(float)}});
    const std::string err = launch(k::Id::reads_before_await, 64, out, Order::Forward);
    bool poisoned = err.empty(), restored = err.empty();
    for (int i = 0; i < 64; ++i) {
      poisoned &= std::isnan(out[64 + size_t(i)]);
      restored &= out[size_t(i)] == float(i) && out[128 + size_t(i)] == float(i) && (checked || out[64 + size_t(i)] == float(i));
    }
    return std::make_pair(poisoned, restored);
  };
  auto [poisoned, restored] = read_early(true);
  check(poisoned && restored, "pre-wait check: a read before await_inputs() sees poison, the buffer is whole after it");
  std::tie(poisoned, restored) = read_early(false);
  check(!poisoned && restored, "pre-wait check off (the next launch): the early read sees the value");

  std::string e = launch(k::Id::barrier_not_reached, 64, out, Order::Forward);
  check(contains(e, "is not reached by thread 32 (it returned)"), "barrier not reached: " + e);
  e = launch(k::Id::two_barriers, 64, out, Order::Forward);
  check(contains(e, "barriers need uniform control flow"), "two barriers: " + e);
  e = launch(k::Id::divergent_simd_sum, 32, out, Order::Forward);
  check(contains(e, "is not reached by lane 16"), "divergent simd_sum: " + e);
  e = launch(k::Id::simd_sum_against_barrier, 32, out, Order::Forward);
  check(contains(e, "collectives need uniform control flow"), "simd_sum against a barrier: " + e);
  e = launch(k::Id::too_much_threadgroup_memory, 32, out, Order::Forward);
  check(contains(e, "exceeds the 32 KiB limit"), "threadgroup memory: " + e);
  e = launch(k::Id::shuffle_out_of_range, 32, out, Order::Forward);
  check(contains(e, "simd_shuffle from lane 40"), "shuffle out of range: " + e);
  e = launch(k::Id::misaligned_vector_load, 32, out, Order::Forward);
  check(contains(e, "is not aligned to 16 bytes"), "misaligned vector load: " + e);
  e = launch(k::Id::with_barrier, 48, out, Order::Forward);
  check(contains(e, "not a multiple of 32"), "threadgroup of 48 threads: " + e);

  e = launch(k::Id::collectives, 32, out, Order::Random);
  bool ok = e.empty();
  for (int l = 0; l < 32 && ok; ++l) {
    ok &= out[size_t(l)] == 496.0f && out[32 + size_t(l)] == 31.0f && out[64 + size_t(l)] == float(l * (l - 1) / 2);
    ok &= out[96 + size_t(l)] == float(l + 3 < 32 ? l + 3 : l) && out[128 + size_t(l)] == float(l ^ 5);
    ok &= out[160 + size_t(l)] == 7.0f;
  }
  check(ok, "simd_sum, simd_max, simd_prefix_exclusive_sum, simd_shuffle_down, simd_shuffle_xor, simd_broadcast" +
                (e.empty() ? "" : ": " + e));

  // Simdgroup matrices: values that are exact in half, so the products and sums are exact in fp32.
  for (Order o : {Order::Forward, Order::Reverse, Order::Random}) {
    std::vector<float> m(256);
    for (size_t j = 0; j < 256; ++j) m[j] = float(int(j * 7 % 13) - 6) * 0.25f;
    const std::vector<float> in = m;
    e = launch(k::Id::simdgroup_matrices, 64, m, o);
    bool exact = e.empty();
    for (int s = 0; s < 2 && exact; ++s)
      for (int r = 0; r < 8; ++r)
        for (int n = 0; n < 8; ++n) {
          double want = 0.5;
          for (int kk = 0; kk < 16; ++kk) want += double(in[size_t(r * 16 + kk)]) * double(in[size_t(128 + kk * 8 + n)]);
          exact &= double(m[size_t((s * 8 + r) * 8 + n)]) == want;
        }
    check(exact, std::string("simdgroup_load (origin, transpose), simdgroup_multiply_accumulate, simdgroup_store in ") +
                     msl_emu::order_name(o) + " order" + (e.empty() ? "" : ": " + e));
  }
  for (Order o : {Order::Forward, Order::Reverse, Order::Random}) {
    std::vector<float> m(256);
    for (size_t j = 0; j < 192; ++j) m[j] = float(int(j * 5 % 11) - 5) * 0.5f;
    const std::vector<float> in = m;
    e = launch(k::Id::simdgroup_matrix_pair, 64, m, o);
    bool exact = e.empty();
    for (int s = 0; s < 2 && exact; ++s)
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 8; ++n) {
          double want = r < 8 ? 0.5 : 0.25;
          for (int kk = 0; kk < 8; ++kk) want += double(in[size_t(r * 8 + kk)]) * double(in[size_t(128 + kk * 8 + n)]);
          exact &= double(m[size_t((s * 16 + r) * 8 + n)]) == want;
        }
    check(exact, std::string("simdgroup_multiply_accumulate_pair (rows 4-byte aligned or not) in ") +
                     msl_emu::order_name(o) + " order" + (e.empty() ? "" : ": " + e));
  }
  for (Order o : {Order::Forward, Order::Reverse, Order::Random}) {
    std::vector<float> m(512);
    for (size_t j = 0; j < 512; ++j) m[j] = float(int(j * 7 % 13) - 6) * 0.25f;
    const std::vector<float> in = m;
    e = launch(k::Id::simdgroup_matrix_16x16, 64, m, o);
    bool exact = e.empty();
    for (int s = 0; s < 2 && exact; ++s)
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 16; ++n) {
          double want = r < 8 ? 0.5 : 0.25;
          for (int kk = 0; kk < 16; ++kk) want += double(in[size_t(r * 16 + kk)]) * double(in[size_t(256 + kk * 16 + n)]);
          exact &= double(m[size_t(s * 256 + r * 16 + n)]) == want;
        }
    check(exact, std::string("simdgroup_load4 (origin, transpose), simdgroup_multiply_accumulate_16x16 in ") +
                     msl_emu::order_name(o) + " order" + (e.empty() ? "" : ": " + e));
  }
  e = launch(k::Id::matrix_load4_misaligned, 32, out, Order::Forward);
  check(contains(e, "is not aligned to 16 bytes"), "simdgroup_load4 from rows not 16-byte aligned: " + e);
  e = launch(k::Id::q4_load_wrong_lane, 32, out, Order::Forward);
  check(contains(e, "given lane 0 by the thread in lane 1"), "simdgroup_q4_load given another lane's index: " + e);
  e = launch(k::Id::matrix_load_divergent, 32, out, Order::Forward);
  check(contains(e, "simdgroup matrix operation"), "simdgroup_load skipped by some lanes: " + e);
  e = launch(k::Id::matrix_load_nonuniform, 32, out, Order::Forward);
  check(contains(e, "differ between lane 0 and lane 1"), "simdgroup_load from a different source per lane: " + e);
  for (Order o : {Order::Forward, Order::Reverse}) {
    e = launch(k::Id::matrix_store_then_read, 32, out, o);
    bool poisoned = false;
    for (int l = 0; l < 32; ++l) poisoned |= std::isnan(out[size_t(l)]);
    check(e.empty() && poisoned, std::string("simdgroup_store read by other lanes without a barrier: NaN poison in ") +
                                     msl_emu::order_name(o) + " order");
  }
  for (Order o : {Order::Forward, Order::Reverse, Order::Random}) {
    e = launch(k::Id::matrix_store_barrier_read, 32, out, o);
    bool twos = e.empty();
    for (int l = 0; l < 32; ++l) twos &= out[size_t(l)] == 2.0f;
    check(twos, std::string("simdgroup_store, simdgroup_barrier, then read by other lanes in ") + msl_emu::order_name(o) +
                    " order");
  }

  std::printf("%s\n", failures ? "emulator self-test FAILED" : "emulator self-test passed");
  return failures ? 1 : 0;
}
