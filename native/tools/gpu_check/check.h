// moelens-gpu-check's shared pieces: random inputs, buffers on both backends, host weights in every
// stored format, the comparisons, and the case registry. One file of cases per op family (cases_*.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/gpu/gpu_backend.h"
#include "backends/gpu/runtimes.h"
#include "core/dtype.h"


namespace moelens::gpu_check {

using gpu::GpuBackend;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- random inputs ----

struct Rng {
  std::mt19937 gen;
  explicit Rng(uint32_t seed) : gen(seed) {}
  float normal(float sd = 1.0f) { return std::normal_distribution<float>(0.0f, sd)(gen); }
  float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(gen); }
  uint32_t bits() { return gen(); }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }
  std::vector<float> normals(size_t n, float sd = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(sd);
    return v;
  }
};

// A buffer with the same contents on both backends.
struct Pair {
  std::unique_ptr<Buffer> cpu, gpu;
};

// The threshold of the tiled kernels in these cases (GpuBackend::set_prefill_min_tokens): 16 tokens, so
// that the per-token kernels keep cases of several tokens and chunks on both sides of it stay small
// shapes (the emulator runs every GPU thread on the CPU); the model's own threshold, PREFILL_MIN_TOKENS,
// is lower, and shorter tiled chunks are checked through the SDK (test/prefill-chunks.test.ts).
constexpr int CHECK_TILED_FROM = 16;

// The GPU backend at fp32 for the rest of a scope, then back at the cases' fp16: for the cases of the
// exact GEMV, which fp16 calls shorter than the tiled threshold leave for 4-bit weights (gemv_int16).
struct ExactGpu {
  GpuBackend& gpu;
  explicit ExactGpu(GpuBackend& g) : gpu(g) { gpu.set_precision(gpu::Precision::F32); }
  ~ExactGpu() { gpu.set_precision(gpu::Precision::F16); }
};
// The CPU backend at the int16 precision for the rest of a scope, then back at fp32: the reference of
// gemv_int16, which quantises its activations as the CPU's int16 precision does.
struct Int16Cpu {
  CpuBackend& cpu;
  explicit Int16Cpu(CpuBackend& c) : cpu(c) { cpu.set_precision(cpu::Precision::Int16); }
  ~Int16Cpu() { cpu.set_precision(cpu::Precision::F32); }
};

struct Ctx {
  CpuBackend& cpu;
  GpuBackend& gpu;
  Rng rng;
  std::string shape;  // what the case ran on, for the report

  Pair floats(const std::vector<float>& v) { return {cpu.upload(v), gpu.upload(v)}; }
  Pair zeros(size_t n) { return {cpu.alloc(ElemType::F32, n), gpu.alloc(ElemType::F32, n)}; }
  Pair ints(const std::vector<int32_t>& v) {
    Pair p{cpu.alloc(ElemType::I32, v.size()), gpu.alloc(ElemType::I32, v.size())};
    cpu.write(View(p.cpu.get()), v.data(), v.size());
    gpu.write(View(p.gpu.get()), v.data(), v.size());
    return p;
  }
  // A KV cache pair of the type the GPU backend takes for shape s (kv_cache_type): an F16 cache holds v
  // rounded to half by the backend's converting copy, and the CPU's cache the same rounded values.
  Pair kv_cache(const std::vector<float>& v, const AttentionShape& s) {
    if (gpu.kv_cache_type(s) != ElemType::F16) return floats(v);
    Pair p{nullptr, gpu.alloc(ElemType::F16, v.size())};
    gpu.copy(View(p.gpu.get()), View(gpu.upload(v).get()), v.size());
    std::vector<uint16_t> bits(v.size());
    gpu.read(View(p.gpu.get()), bits.data(), v.size());
    std::vector<float> rounded(v.size());
    for (size_t i = 0; i < v.size(); ++i) rounded[i] = f16_to_f32(bits[i]);
    p.cpu = cpu.upload(rounded);
    return p;
  }
  std::vector<float> read_cpu(const Pair& p, size_t n, size_t offset = 0) {
    std::vector<float> v(n);
    cpu.read(View(p.cpu.get(), offset), v.data(), n);
    return v;
  }
  std::vector<float> read_gpu(const Pair& p, size_t n, size_t offset = 0) {
    std::vector<float> v(n);
    gpu.read(View(p.gpu.get(), offset), v.data(), n);
    return v;
  }
  // max |gpu - cpu| / max(|cpu|) over the first n elements must stay within tol.
  void expect_close(const char* what, const Pair& p, size_t n, float tol, size_t offset = 0) {
    const std::vector<float> c = read_cpu(p, n, offset), g = read_gpu(p, n, offset);
    float scale = 0.f, worst = 0.f;
    size_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      scale = std::max(scale, std::fabs(c[i]));
      if (!(std::fabs(g[i] - c[i]) <= worst)) worst = std::fabs(g[i] - c[i]), at = i;  // NaN counts as worst
    }
    const float rel = worst / std::max(scale, 1e-20f);
    if (!(rel <= tol)) {
      std::ostringstream s;
      s << what << ": relative error " << rel << " > " << tol << " at element " << at << " (gpu " << g[at] << ", cpu "
        << c[at] << ")";
      throw Failure(s.str());
    }
  }
  // Launches of one kernel so far (which path a call took).
  uint64_t launches(gpu::kernels::Id id) const { return gpu.dispatches_by_kernel()[size_t(id)]; }
  void expect_equal_ints(const char* what, const Pair& p, size_t n) {
    std::vector<int32_t> c(n), g(n);
    cpu.read(View(p.cpu.get()), c.data(), n);
    gpu.read(View(p.gpu.get()), g.data(), n);
    for (size_t i = 0; i < n; ++i)
      if (c[i] != g[i])
        throw Failure(std::string(what) + ": element " + std::to_string(i) + ": gpu " + std::to_string(g[i]) + ", cpu " +
                      std::to_string(c[i]));
  }
};

// A random weight matrix (or expert stack) in host memory, in one stored format.
struct HostWeight {
  LinearWeight w;
  std::vector<std::vector<uint8_t>> data, scales, biases;

  HostWeight(Rng& rng, const std::string& format, int64_t rows, int64_t cols, int64_t experts = 0, int group = 64,
             DType scale_dtype = DType::BF16) {
    w.name = format + " weight";
    w.experts = experts;
    w.rows = rows;
    w.cols = cols;
    const int64_t stacks = std::max<int64_t>(1, experts);
    const float sd = 1.0f / std::sqrt(float(cols));
    if (format == "q4" || format == "q8") {
      w.dtype = DType::U32;
      w.bits = format == "q4" ? 4 : 8;
      w.group_size = group;
      w.scale_dtype = scale_dtype;
      for (int64_t e = 0; e < stacks; ++e) {
        data.emplace_back(w.row_bytes() * size_t(rows));
        for (auto& b : data.back()) b = uint8_t(rng.bits());
        const size_t groups = size_t(rows) * w.groups_per_row();
        scales.emplace_back(groups * dtype_size(scale_dtype));
        biases.emplace_back(groups * dtype_size(scale_dtype));
        const float levels = float((1 << w.bits) - 1);
        for (size_t g = 0; g < groups; ++g) {
          // MLX's quantiser: scales of either sign, bias = one edge of the group's range.
          const float s = rng.uniform(0.5f, 1.5f) * 2.0f * sd / levels * (rng.bits() % 4 == 0 ? -1.0f : 1.0f);
          const float b = -s * levels * 0.5f + rng.normal(0.1f * sd);
          store(scales.back().data(), g, s, scale_dtype);
          store(biases.back().data(), g, b, scale_dtype);
        }
      }
    } else {
      w.dtype = format == "bf16" ? DType::BF16 : format == "f16" ? DType::F16 : DType::F32;
      for (int64_t e = 0; e < stacks; ++e) {
        data.emplace_back(w.row_bytes() * size_t(rows));
        for (size_t i = 0; i < size_t(rows * cols); ++i) store(data.back().data(), i, rng.normal(sd), w.dtype);
      }
    }
    for (int64_t e = 0; e < stacks; ++e) {
      w.data.push_back(data[size_t(e)].data());
      if (w.quantized()) {
        w.scales.push_back(scales[size_t(e)].data());
        w.biases.push_back(biases[size_t(e)].data());
      }
    }
  }

  static uint16_t to_f16(float f) {
    // Through the emulator-independent path: round to nearest even via float arithmetic.
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    float a = std::fabs(f);
    if (a < 6.1035156e-05f) return uint16_t(sign | uint32_t(std::nearbyint(a / 5.9604645e-08f)));
    int e;
    float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    uint32_t man = uint32_t(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
    int exp = e - 1 + 15;
    if (man == 1024) man = 0, ++exp;
    return uint16_t(sign | uint32_t(exp) << 10 | man);
  }
  static void store(uint8_t* base, size_t i, float v, DType t) {
    if (t == DType::F32) {
      std::memcpy(base + 4 * i, &v, 4);
    } else {
      const uint16_t h = t == DType::BF16 ? f32_to_bf16(v) : to_f16(v);
      std::memcpy(base + 2 * i, &h, 2);
    }
  }
};

struct WeightPair {
  std::unique_ptr<Weight> cpu, gpu;
};
inline WeightPair upload(Ctx& c, const HostWeight& h) { return {c.cpu.upload(h.w), c.gpu.upload(h.w)}; }

// ---- the cases: one Backend call (or a few) on both backends ----

struct Case {
  std::string name;
  std::function<void(Ctx&)> run;
};

using Cases = std::vector<Case>;

// Adds to a family's list: add("name", [](Ctx& c) { ... }).
struct CaseAdder {
  Cases& all;
  void operator()(std::string name, std::function<void(Ctx&)> f) const { all.push_back({std::move(name), std::move(f)}); }
};

// Each family's cases, in the order main() runs them.
void add_elementwise_cases(Cases& all);
void add_norm_cases(Cases& all);
void add_matmul_cases(Cases& all);
void add_deltanet_cases(Cases& all);
void add_attention_cases(Cases& all);
void add_moe_cases(Cases& all);
void add_argmax_cases(Cases& all);

}  // namespace moelens::gpu_check
