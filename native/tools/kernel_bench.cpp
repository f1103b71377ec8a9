// moelens-kernel-bench: throughput of the CPU backend's matmul on MLX-quantized and dense weights
// of realistic shapes, in GB/s of weight bytes read (decode: one activation row) and GFLOP/s
// (prefill: many rows), from process CPU time divided by the threads (an estimate of wall time on an idle machine).
// Each shape runs in every CPU precision (fp32 activations: exact; int8 / int16 / int24 activations: int8.h), labelled.
// Usage: moelens-kernel-bench [--threads N] [--rows R] [--cols C] [--tokens T] [--precision fp32,int8,int16,int24]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"

using namespace moelens;

int main(int argc, char** argv) {
  int threads = 0, rows = 16384, cols = 2048, tokens = 64;
  std::vector<cpu::Precision> precisions = {cpu::Precision::F32, cpu::Precision::Int8, cpu::Precision::Int16, cpu::Precision::Int24};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--precision") {
      precisions.clear();
      std::string list = argv[i + 1];
      for (size_t a = 0; a <= list.size();) {
        size_t b = list.find(',', a);
        if (b == std::string::npos) b = list.size();
        cpu::Precision p;
        if (!cpu::parse_precision(list.substr(a, b - a), &p)) {
          std::fprintf(stderr, "moelens-kernel-bench: --precision takes fp32, int8, int16 and/or int24, comma-separated\n");
          return 2;
        }
        precisions.push_back(p);
        a = b + 1;
      }
      continue;
    }
    int v = std::atoi(argv[i + 1]);
    if (k == "--threads") threads = v;
    else if (k == "--rows") rows = v;
    else if (k == "--cols") cols = v;
    else if (k == "--tokens") tokens = v;
  }
  CpuBackend be(threads);
  std::mt19937 rng(1);
  for (int bits : {4, 8}) {
    const int gs = 64;
    std::vector<uint8_t> q(size_t(rows) * cols * bits / 8), sb(size_t(rows) * (cols / gs) * 2), bb(sb.size());
    for (auto& b : q) b = uint8_t(rng());
    for (size_t i = 0; i < sb.size(); i += 2) {
      uint16_t s = f32_to_bf16(0.001f * float(rng() % 100)), o = f32_to_bf16(-0.05f);
      std::memcpy(&sb[i], &s, 2);
      std::memcpy(&bb[i], &o, 2);
    }
    LinearWeight w;
    w.name = "bench";
    w.rows = rows;
    w.cols = cols;
    w.dtype = DType::U32;
    w.bits = bits;
    w.group_size = gs;
    w.scale_dtype = DType::BF16;
    w.data = {q.data()};
    w.scales = {sb.data()};
    w.biases = {bb.data()};
    auto weight = be.upload(w);
    std::vector<std::pair<cpu::Precision, int>> runs;  // (precision, activation rows)
    for (cpu::Precision p : precisions)
      for (int n : {1, tokens}) runs.push_back({p, n});
    for (const auto& [precision, n] : runs) {
      be.set_precision(precision);
      auto x = be.alloc(ElemType::F32, size_t(n) * cols);
      auto y = be.alloc(ElemType::F32, size_t(n) * rows);
      std::vector<float> xs(size_t(n) * cols);
      for (auto& v : xs) v = float(int(rng() % 2001) - 1000) / 1000.f;
      be.write(x, xs.data(), xs.size());
      be.matmul(*weight, x, n, y);  // warm-up
      int reps = n == 1 ? 20 : 2;
      // Process CPU time, not wall time: on a shared machine it excludes time spent descheduled.
      auto cpu_now = [] {
        timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
      };
      const double t0 = cpu_now();
      for (int r = 0; r < reps; ++r) be.matmul(*weight, x, n, y);
      double s = (cpu_now() - t0) / reps / be.threads();
      double gb = double(w.bytes()) / 1e9;
      std::printf("%d-bit %dx%d %s n=%-4d %8.3f ms  %6.2f GB/s  %7.2f GFLOP/s  %8.0f rows/s\n", bits, rows, cols,
                  cpu::precision_name(precision), n, s * 1e3, gb / s, 2.0 * rows * cols * n / s / 1e9,
                  double(rows) * n / s);
    }
  }
  return 0;
}
