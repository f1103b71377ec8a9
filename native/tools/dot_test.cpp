// moelens-dot-test: the CPU backend's SIMD row kernels (whichever this build compiled: AVX-512, AVX2,
// NEON or scalar) against a plain scalar reference, on random rows of every stored format.
// Prints one line per case and exits non-zero on any mismatch. Used by `npm test` and, cross-compiled,
// under qemu for the arm64 (NEON) build.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/dot.h"

using namespace moelens;
using namespace moelens::cpu;

namespace {

struct Case {
  DType dtype;
  int bits, group_size, cols;
};

// Σ (s·q + b)·x, or Σ w·x, in double.
double reference(const LinearWeight& w, const Row& row, const float* x) {
  double acc = 0;
  for (int64_t i = 0; i < w.cols; ++i) {
    double wi;
    if (w.quantized()) {
      const int64_t g = i / w.group_size;
      const uint8_t byte = row.data[i * w.bits / 8];
      const int q = w.bits == 8 ? byte : (byte >> (4 * (i & 1))) & 0xF;
      wi = double(load_float(row.scales, w.scale_dtype, size_t(g))) * q + load_float(row.biases, w.scale_dtype, size_t(g));
    } else {
      wi = load_float(row.data, w.dtype, size_t(i));
    }
    acc += wi * x[i];
  }
  return acc;
}

const char* simd_name() {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__ARM_NEON)
  return "neon";
#else
  return "scalar";
#endif
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const Case cases[] = {
      {DType::U32, 4, 64, 2048}, {DType::U32, 4, 32, 512}, {DType::U32, 4, 128, 1024}, {DType::U32, 4, 8, 96},
      {DType::U32, 8, 64, 2048}, {DType::U32, 8, 32, 512},  {DType::U32, 8, 16, 80},    {DType::BF16, 0, 0, 2048},
      {DType::BF16, 0, 0, 100},  {DType::F16, 0, 0, 520},    {DType::F32, 0, 0, 333},
  };
  int failures = 0;
  const int rows = 8;
  for (const Case& c : cases) {
    LinearWeight w;
    w.name = "test";
    w.rows = rows;
    w.cols = c.cols;
    w.dtype = c.dtype;
    w.bits = c.bits;
    w.group_size = c.group_size;
    w.scale_dtype = DType::BF16;
    std::vector<uint8_t> data(size_t(rows) * w.row_bytes()), scales, biases;
    for (auto& b : data) b = uint8_t(rng());
    if (!w.quantized() && c.dtype != DType::F32) {  // keep values finite: random bf16/f16 bit patterns may be NaN
      for (size_t i = 0; i < data.size(); i += 2) {
        const float f = uni(rng);
        uint16_t h = c.dtype == DType::BF16 ? f32_to_bf16(f) : uint16_t(0x3800 | (rng() & 0x3ff) | ((rng() & 1) << 15));
        std::memcpy(&data[i], &h, 2);
      }
    } else if (c.dtype == DType::F32) {
      for (size_t i = 0; i < data.size(); i += 4) {
        const float f = uni(rng);
        std::memcpy(&data[i], &f, 4);
      }
    }
    if (w.quantized()) {
      scales.resize(size_t(rows) * w.scale_row_bytes());
      biases.resize(scales.size());
      for (size_t i = 0; i < scales.size(); i += 2) {
        uint16_t s = f32_to_bf16(0.05f * uni(rng)), b = f32_to_bf16(0.3f * uni(rng));  // negative scales too
        std::memcpy(&scales[i], &s, 2);
        std::memcpy(&biases[i], &b, 2);
      }
      w.scales = {scales.data()};
      w.biases = {biases.data()};
    }
    w.data = {data.data()};
    std::vector<float> x(size_t(c.cols));
    for (float& v : x) v = uni(rng);
    PreparedInput in;
    prepare_input(w, x.data(), &in);
    double worst = 0;
    std::vector<float> deq(size_t(c.cols)), xr(size_t(c.cols));
    for (int r = 0; r < rows; ++r) {
      const Row row = row_of(w, 0, r);
      const double want = reference(w, row, x.data());
      worst = std::max(worst, std::fabs(dot_row(w, row, in) - want));
      // Dequantised rows in the kernels' column order dot the same way.
      dequantize_row_reordered(w, row, deq.data());
      if (uses_reordered_columns(w)) reorder_columns(x.data(), c.cols, xr.data());
      else xr = x;
      worst = std::max(worst, std::fabs(dot_f32(deq.data(), xr.data(), c.cols) - want));
    }
    const double tol = 1e-5 * c.cols;
    const bool ok = worst <= tol;
    failures += !ok;
    std::printf("%-6s %-4s bits=%d group=%-3d cols=%-4d max|err|=%.2e %s\n", simd_name(), dtype_name(c.dtype), c.bits,
                c.group_size, c.cols, worst, ok ? "ok" : "FAIL");
  }
  std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
