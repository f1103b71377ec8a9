// moelens-gpu-check: every kernel of shaders/*.metal against the CPU backend (the numerical
// reference), on random inputs and small shapes, through the GPU backend's own host code.
//
//   moelens-gpu-check                      emulator, forward + reverse + random thread orders
//   moelens-gpu-check --runtime cuda       on the GPU (the H200 machine)
//   moelens-gpu-check --runtime metal      on the GPU (a Mac)
//
// Prints one line per kernel function: its name, the shapes of the cases that ran it, the orders
// tried, and `ok` or the first failure. Exits 1 when a kernel fails or no case runs it.
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
#include "backends/metal/gpu_backend.h"
#include "backends/metal/runtimes.h"
#include "core/dtype.h"

using namespace moelens;
using gpu::GpuBackend;

namespace {

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
WeightPair upload(Ctx& c, const HostWeight& h) { return {c.cpu.upload(h.w), c.gpu.upload(h.w)}; }

// ---- the cases: one Backend call (or a few) on both backends ----

struct Case {
  std::string name;
  std::function<void(Ctx&)> run;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  auto add = [&](std::string name, std::function<void(Ctx&)> f) { all.push_back({std::move(name), std::move(f)}); };

  for (std::string fmt : {"q4", "q8", "bf16", "f16", "f32"})
    add("embed " + fmt, [fmt](Ctx& c) {
      c.shape = "vocab 50, hidden 128, 4 ids";
      HostWeight table(c.rng, fmt, 50, 128, 0, fmt == "q8" ? 32 : 64);
      WeightPair t = upload(c, table);
      Pair ids = c.ints({3, 49, 0, 17});
      Pair out = c.zeros(4 * 128);
      c.cpu.embed(*t.cpu, View(ids.cpu.get()), 4, View(out.cpu.get()));
      c.gpu.embed(*t.gpu, View(ids.gpu.get()), 4, View(out.gpu.get()));
      c.expect_close("embed", out, 4 * 128, 1e-6f);
    });

  add("rms_norm", [](Ctx& c) {
    c.shape = "3x300 + in place 1x300";
    const int rows = 3, dim = 300;
    Pair x = c.floats(c.rng.normals(rows * dim)), w = c.floats(c.rng.normals(dim));
    Pair out = c.zeros(rows * dim);
    for (Backend* b : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
      const bool g = b == &c.gpu;
      b->rms_norm(View(g ? x.gpu.get() : x.cpu.get()), View(g ? w.gpu.get() : w.cpu.get()), rows, dim, 1e-6f,
                  View(g ? out.gpu.get() : out.cpu.get()));
      b->rms_norm(View(g ? x.gpu.get() : x.cpu.get(), dim), View(), 1, dim, 1e-5f, View(g ? x.gpu.get() : x.cpu.get(), dim));
    }
    c.expect_close("rms_norm", out, rows * dim, 1e-5f);
    c.expect_close("rms_norm in place, no weight", x, rows * dim, 1e-5f);
  });

  add("residual add + rms_norm", [](Ctx& c) {
    // The session's pattern: add(h, mix) then rms_norm(h): one fused launch on the GPU backend.
    c.shape = "4x200, scale 0.5";
    const int rows = 4, dim = 200;
    Pair h = c.floats(c.rng.normals(rows * dim)), mix = c.floats(c.rng.normals(rows * dim)), w = c.floats(c.rng.normals(dim));
    Pair out = c.zeros(rows * dim);
    for (Backend* b : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
      const bool g = b == &c.gpu;
      b->add(View(g ? h.gpu.get() : h.cpu.get()), View(g ? mix.gpu.get() : mix.cpu.get()), size_t(rows) * dim, 0.5f);
      b->rms_norm(View(g ? h.gpu.get() : h.cpu.get()), View(g ? w.gpu.get() : w.cpu.get()), rows, dim, 1e-6f,
                  View(g ? out.gpu.get() : out.cpu.get()));
    }
    c.expect_close("residual", h, rows * dim, 1e-6f);
    c.expect_close("norm", out, rows * dim, 1e-5f);
  });

  add("elementwise", [](Ctx& c) {
    c.shape = "1000 elements at offsets";
    const size_t n = 1000;
    Pair a = c.floats(c.rng.normals(n)), b = c.floats(c.rng.normals(n));
    // Copies move bits: their source is uploaded data, so CPU and GPU must agree exactly (arithmetic results
    // may differ by an ulp where a GPU compiler contracts a*b+c into one FMA).
    Pair src = c.floats(c.rng.normals(n));
    Pair out = c.zeros(n + 8), ints = c.ints(std::vector<int32_t>(40, 7));
    for (Backend* be : {static_cast<Backend*>(&c.cpu), static_cast<Backend*>(&c.gpu)}) {
      const bool gp = be == &c.gpu;
      auto V = [&](Pair& p, size_t off = 0) { return View(gp ? p.gpu.get() : p.cpu.get(), off); };
      be->add(V(a, 3), V(b, 5), n - 10, 0.5f);
      be->scale(V(b), -1.25f, n);
      be->copy(V(out, 8), V(src), n);
      be->fill(V(out), 2.5f, 8);
      be->fill(V(ints, 4), 0.0f, 30);
    }
    c.expect_close("add", a, n, 1e-6f);
    c.expect_close("scale", b, n, 1e-6f);
    c.expect_close("copy/fill", out, n + 8, 0.0f);
    c.expect_equal_ints("fill of an int buffer", ints, 40);
  });

  // Wide rows: the launch splits each block of rows over several simdgroups (split-K).
  struct MatmulShape {
    std::string fmt;
    int group;
    DType scale;
    int n;
    size_t x_offset;  // 1: activations not 16-byte aligned (scalar loads)
    int cols = 256;
  };
  for (MatmulShape m : {MatmulShape{"q4", 64, DType::BF16, 1, 0}, MatmulShape{"q4", 32, DType::F16, 3, 0},
                        MatmulShape{"q4", 128, DType::F32, 2, 1}, MatmulShape{"q8", 64, DType::BF16, 1, 1},
                        MatmulShape{"q8", 32, DType::BF16, 2, 0}, MatmulShape{"bf16", 0, DType::BF16, 2, 1},
                        MatmulShape{"f16", 0, DType::BF16, 1, 0}, MatmulShape{"f32", 0, DType::BF16, 3, 1},
                        MatmulShape{"f32", 0, DType::BF16, 1, 0}, MatmulShape{"q4", 64, DType::BF16, 1, 0, 4096},
                        MatmulShape{"q4", 64, DType::BF16, 3, 1, 2048}, MatmulShape{"q8", 64, DType::BF16, 2, 0, 2048},
                        MatmulShape{"bf16", 0, DType::BF16, 1, 1, 2048}})
    add("matmul " + m.fmt + (m.group ? " g" + std::to_string(m.group) : "") + " n" + std::to_string(m.n) +
            (m.x_offset ? " unaligned" : "") + (m.cols != 256 ? " x" + std::to_string(m.cols) : ""),
        [m](Ctx& c) {
          const int rows = 37, cols = m.cols;
          c.shape = "37x" + std::to_string(cols) + (m.x_offset ? ", x at an odd offset" : "");
          HostWeight h(c.rng, m.fmt, rows, cols, 0, m.group ? m.group : 64, m.scale);
          WeightPair w = upload(c, h);
          Pair x = c.floats(c.rng.normals(m.x_offset + size_t(m.n) * cols)), out = c.zeros(size_t(m.n) * rows);
          c.cpu.matmul(*w.cpu, View(x.cpu.get(), m.x_offset), m.n, View(out.cpu.get()));
          c.gpu.matmul(*w.gpu, View(x.gpu.get(), m.x_offset), m.n, View(out.gpu.get()));
          c.expect_close("matmul", out, size_t(m.n) * rows, 2e-5f);
        });

  for (int cols : {128, 4096})
    add("matmul_group x" + std::to_string(cols), [cols](Ctx& c) {
      c.shape = "5 matrices (q4, q8, bf16) x " + std::to_string(cols);
      std::vector<HostWeight> hw;
      const char* fmts[] = {"q4", "q8", "q4", "q8", "bf16"};
      const int rows[] = {40, 16, 33, 1, 9};
      for (int j = 0; j < 5; ++j) hw.emplace_back(c.rng, fmts[j], rows[j], cols);
      std::vector<WeightPair> w;
      std::vector<Pair> outs;
      for (int j = 0; j < 5; ++j) w.push_back(upload(c, hw[size_t(j)])), outs.push_back(c.zeros(size_t(rows[j])));
      Pair x = c.floats(c.rng.normals(cols));
      std::vector<Backend::MatmulJob> jc, jg;
      for (int j = 0; j < 5; ++j) {
        jc.push_back({w[size_t(j)].cpu.get(), View(outs[size_t(j)].cpu.get())});
        jg.push_back({w[size_t(j)].gpu.get(), View(outs[size_t(j)].gpu.get())});
      }
      c.cpu.matmul_group(jc, View(x.cpu.get()), 1);
      c.gpu.matmul_group(jg, View(x.gpu.get()), 1);
      for (int j = 0; j < 5; ++j) c.expect_close("matmul_group", outs[size_t(j)], size_t(rows[j]), 2e-5f);
    });

  for (int n : {1, 5})
    add("conv_silu n" + std::to_string(n), [n](Ctx& c) {
      c.shape = "300 channels, kernel 4";
      const int channels = 300, kernel = 4;
      Pair x = c.floats(c.rng.normals(size_t(n) * channels)), st = c.floats(c.rng.normals(size_t(kernel - 1) * channels));
      Pair w = c.floats(c.rng.normals(size_t(channels) * kernel)), out = c.zeros(size_t(n) * channels);
      c.cpu.conv_silu(View(x.cpu.get()), View(st.cpu.get()), View(w.cpu.get()), n, channels, kernel, View(out.cpu.get()));
      c.gpu.conv_silu(View(x.gpu.get()), View(st.gpu.get()), View(w.gpu.get()), n, channels, kernel, View(out.gpu.get()));
      c.expect_close("conv_silu out", out, size_t(n) * channels, 1e-6f);
      c.expect_close("conv_silu state", st, size_t(kernel - 1) * channels, 0.0f);
    });

  struct DnShape {
    int kh, vh, dk, dv, n;
    bool trace;
  };
  for (DnShape d : {DnShape{2, 4, 64, 64, 1, true}, DnShape{2, 4, 64, 64, 4, false}, DnShape{1, 2, 128, 32, 3, true},
                    DnShape{2, 2, 32, 96, 2, true}, DnShape{2, 4, 128, 96, 2, false}})
    add("deltanet " + std::to_string(d.vh) + "x" + std::to_string(d.dk) + "x" + std::to_string(d.dv) + " n" +
            std::to_string(d.n) + (d.trace ? " traced" : ""),
        [d](Ctx& c) {
          c.shape = std::to_string(d.kh) + "/" + std::to_string(d.vh) + " heads, dk " + std::to_string(d.dk) + ", dv " +
                    std::to_string(d.dv) + ", " + std::to_string(d.n) + " tokens";
          const int conv_dim = 2 * d.kh * d.dk + d.vh * d.dv;
          const DeltaNetShape s{d.kh, d.vh, d.dk, d.dv, 1e-6f};
          Pair qkv = c.floats(c.rng.normals(size_t(d.n) * conv_dim)), b = c.floats(c.rng.normals(size_t(d.n) * d.vh));
          Pair a = c.floats(c.rng.normals(size_t(d.n) * d.vh)), A = c.floats(c.rng.normals(d.vh, 0.5f));
          Pair dt = c.floats(c.rng.normals(d.vh)), st = c.floats(c.rng.normals(size_t(d.vh) * d.dk * d.dv, 0.1f));
          Pair out = c.zeros(size_t(d.n) * d.vh * d.dv), tb = c.zeros(size_t(d.n) * d.vh), td = c.zeros(size_t(d.n) * d.vh),
               tn = c.zeros(size_t(d.n) * d.vh);
          DeltaNetTrace trc, trg;
          if (d.trace) {
            trc = {View(tb.cpu.get()), View(td.cpu.get()), View(tn.cpu.get())};
            trg = {View(tb.gpu.get()), View(td.gpu.get()), View(tn.gpu.get())};
          }
          c.cpu.deltanet(View(qkv.cpu.get()), View(b.cpu.get()), View(a.cpu.get()), View(A.cpu.get()), View(dt.cpu.get()),
                         View(st.cpu.get()), d.n, s, View(out.cpu.get()), trc);
          c.gpu.deltanet(View(qkv.gpu.get()), View(b.gpu.get()), View(a.gpu.get()), View(A.gpu.get()), View(dt.gpu.get()),
                         View(st.gpu.get()), d.n, s, View(out.gpu.get()), trg);
          c.expect_close("deltanet out", out, size_t(d.n) * d.vh * d.dv, 1e-4f);
          c.expect_close("deltanet state", st, size_t(d.vh) * d.dk * d.dv, 1e-4f);
          if (d.trace) {
            c.expect_close("deltanet beta", tb, size_t(d.n) * d.vh, 1e-6f);
            c.expect_close("deltanet decay", td, size_t(d.n) * d.vh, 1e-5f);
            c.expect_close("deltanet state norm", tn, size_t(d.n) * d.vh, 1e-5f);
          }
        });

  add("gated_rms_norm", [](Ctx& c) {
    c.shape = "9 rows of 64, in place";
    const int rows = 9, dim = 64;
    Pair x = c.floats(c.rng.normals(rows * dim)), z = c.floats(c.rng.normals(rows * dim)), w = c.floats(c.rng.normals(dim));
    c.cpu.gated_rms_norm(View(x.cpu.get()), View(z.cpu.get()), View(w.cpu.get()), rows, dim, 1e-6f, View(x.cpu.get()));
    c.gpu.gated_rms_norm(View(x.gpu.get()), View(z.gpu.get()), View(w.gpu.get()), rows, dim, 1e-6f, View(x.gpu.get()));
    c.expect_close("gated_rms_norm", x, rows * dim, 1e-5f);
  });

  for (bool gated : {true, false})
    add(std::string("attention_prep") + (gated ? " gated" : ""), [gated](Ctx& c) {
      c.shape = "4/2 heads of 64, rotary 16, 3 tokens at 1000";
      const AttentionShape s{4, 2, 64, 16, gated, 1e7f, 1e-6f};
      const int n = 3, pos0 = 1000, qw = s.heads * s.head_dim * (gated ? 2 : 1);
      Pair qg = c.floats(c.rng.normals(size_t(n) * qw)), k = c.floats(c.rng.normals(size_t(n) * s.kv_heads * s.head_dim));
      Pair qn = c.floats(c.rng.normals(s.head_dim)), kn = c.floats(c.rng.normals(s.head_dim));
      Pair q = c.zeros(size_t(n) * s.heads * s.head_dim), gate = c.zeros(size_t(n) * s.heads * s.head_dim);
      c.cpu.attention_prep(View(qg.cpu.get()), View(k.cpu.get()), View(qn.cpu.get()), View(kn.cpu.get()), n, pos0, s,
                           View(q.cpu.get()), View(gate.cpu.get()));
      c.gpu.attention_prep(View(qg.gpu.get()), View(k.gpu.get()), View(qn.gpu.get()), View(kn.gpu.get()), n, pos0, s,
                           View(q.gpu.get()), View(gate.gpu.get()));
      c.expect_close("attention_prep q", q, size_t(n) * s.heads * s.head_dim, 1e-5f);
      c.expect_close("attention_prep k", k, size_t(n) * s.kv_heads * s.head_dim, 1e-5f);
      c.expect_close("attention_prep gate", gate, size_t(n) * s.heads * s.head_dim, 0.0f);
    });

  struct AttnShape {
    int heads, kv, dim, n, pos0;
    bool probs, gated;
  };
  for (AttnShape a : {AttnShape{4, 2, 64, 3, 70, true, true}, AttnShape{4, 2, 64, 1, 130, false, true},
                      AttnShape{16, 2, 32, 1, 40, true, false}, AttnShape{2, 2, 256, 5, 0, true, true}})
    add("attention " + std::to_string(a.heads) + "/" + std::to_string(a.kv) + "x" + std::to_string(a.dim) + " n" +
            std::to_string(a.n) + " at " + std::to_string(a.pos0) + (a.gated ? " gated" : ""),
        [a](Ctx& c) {
          c.shape = std::to_string(a.heads) + "/" + std::to_string(a.kv) + " heads of " + std::to_string(a.dim) + ", " +
                    std::to_string(a.n) + " tokens at " + std::to_string(a.pos0) + (a.gated ? ", gated" : "");
          const AttentionShape s{a.heads, a.kv, a.dim, a.dim / 4, true, 1e7f, 1e-6f};
          const int total = a.pos0 + a.n;
          const size_t kvw = size_t(a.kv) * a.dim, width = size_t(a.n) * a.heads * a.dim;
          Pair q = c.floats(c.rng.normals(width)), kc = c.floats(c.rng.normals(size_t(total) * kvw));
          Pair vc = c.floats(c.rng.normals(size_t(total) * kvw)), out = c.zeros(width);
          Pair gate = c.floats(c.rng.normals(width, 2.0f));
          Pair probs = c.zeros(size_t(a.heads) * a.n * total + 1);
          c.cpu.attention(View(q.cpu.get()), View(kc.cpu.get()), View(vc.cpu.get()), a.n, a.pos0, s, View(out.cpu.get()),
                          a.probs ? View(probs.cpu.get()) : View(), a.gated ? View(gate.cpu.get()) : View());
          c.gpu.attention(View(q.gpu.get()), View(kc.gpu.get()), View(vc.gpu.get()), a.n, a.pos0, s, View(out.gpu.get()),
                          a.probs ? View(probs.gpu.get()) : View(), a.gated ? View(gate.gpu.get()) : View());
          c.expect_close("attention out", out, width, 1e-5f);
          if (a.probs) c.expect_close("attention probs", probs, size_t(a.heads) * a.n * total + 1, 1e-5f);
        });

  // ties: integer logits, so that many probabilities are equal (lower ids first); enabled: all but
  // this many experts are disabled, so that experts of probability 0 fill the top-k.
  struct RouteShape {
    int n, experts, k;
    bool renorm, bias, probs, ties = false;
    int enabled = 0;
  };
  for (RouteShape r : {RouteShape{3, 40, 6, true, false, true}, RouteShape{2, 300, 8, false, true, true},
                       RouteShape{4, 16, 4, true, true, false}, RouteShape{1, 512, 10, true, true, true},
                       RouteShape{3, 256, 8, true, false, true, true}, RouteShape{2, 100, 40, true, true, false, true},
                       RouteShape{2, 64, 9, true, true, true, false, 4}})
    add("route " + std::to_string(r.experts) + " top-" + std::to_string(r.k) + (r.bias ? " biased" : "") +
            (r.ties ? " ties" : "") + (r.enabled ? " " + std::to_string(r.enabled) + " enabled" : ""),
        [r](Ctx& c) {
      c.shape = std::to_string(r.n) + " tokens";
      std::vector<float> l = c.rng.normals(size_t(r.n) * r.experts, 2.0f);
      if (r.ties)
        for (float& v : l) v = std::round(v);
      Pair logits = c.floats(l);
      std::vector<float> bias(size_t(r.n) * r.experts, 0.0f);
      if (r.enabled)
        for (size_t i = 0; i < bias.size(); ++i) bias[i] = int(i % size_t(r.experts)) % (r.experts / r.enabled) ? -INFINITY : 0.0f;
      else if (r.bias)
        for (int t = 0; t < r.n; ++t) {
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = -INFINITY;
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = INFINITY;
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = 1.5f;
        }
      Pair b = c.floats(bias), ids = c.ints(std::vector<int32_t>(size_t(r.n) * r.k, -1));
      Pair w = c.zeros(size_t(r.n) * r.k), probs = c.zeros(size_t(r.n) * r.experts);
      c.cpu.route(View(logits.cpu.get()), r.bias ? View(b.cpu.get()) : View(), r.n, r.experts, r.k, r.renorm,
                  View(ids.cpu.get()), View(w.cpu.get()), r.probs ? View(probs.cpu.get()) : View());
      c.gpu.route(View(logits.gpu.get()), r.bias ? View(b.gpu.get()) : View(), r.n, r.experts, r.k, r.renorm,
                  View(ids.gpu.get()), View(w.gpu.get()), r.probs ? View(probs.gpu.get()) : View());
      c.expect_equal_ints("route ids", ids, size_t(r.n) * r.k);
      c.expect_close("route weights", w, size_t(r.n) * r.k, 1e-5f);
      if (r.probs) c.expect_close("route probs", probs, size_t(r.n) * r.experts, 1e-5f);
    });

  // Wide: long expert rows, so that moe_down splits its blocks over several simdgroups (split-K).
  for (std::string fmt : {"q4", "q8", "bf16"})
    for (int n : {1, 3})
      for (int variant : {0, 1, 2})  // 0: routed only, 1: with the shared expert, 2: wide, with the shared expert
        add("moe_experts " + fmt + " n" + std::to_string(n) + (variant ? " + shared" : "") + (variant == 2 ? " wide" : ""),
            [fmt, n, variant](Ctx& c) {
          const bool with_shared = variant > 0, wide = variant == 2;
          const int E = wide ? 5 : 6, H = wide ? 64 : 128, I = wide ? 1024 : 64, K = wide ? 4 : 3, SI = wide ? 512 : 96;
          c.shape = std::to_string(E) + " experts " + std::to_string(H) + "x" + std::to_string(I) + " top-" + std::to_string(K) +
                    (with_shared ? ", shared expert " + std::to_string(SI) + " scaled 0.7" : "");
          HostWeight g(c.rng, fmt, I, H, E), u(c.rng, fmt, I, H, E), d(c.rng, fmt, H, I, E, fmt == "q8" ? 32 : 64);
          HostWeight sg(c.rng, fmt, SI, H), su(c.rng, fmt, SI, H), sd(c.rng, fmt, H, SI, 0, 32);
          WeightPair G = upload(c, g), U = upload(c, u), D = upload(c, d);
          WeightPair SG = upload(c, sg), SU = upload(c, su), SD = upload(c, sd);
          std::vector<int32_t> id;
          std::vector<float> wt;
          for (int t = 0; t < n; ++t)
            for (int s = 0; s < K; ++s) id.push_back((t * 2 + s * 3) % E), wt.push_back(c.rng.uniform(0.1f, 0.5f));
          Pair ids = c.ints(id), w = c.floats(wt), x = c.floats(c.rng.normals(size_t(n) * H)), out = c.zeros(size_t(n) * H);
          Pair gl = c.floats(c.rng.normals(n));
          Backend::SharedExpert shc, shg;
          if (with_shared) {
            shc = {SG.cpu.get(), SU.cpu.get(), SD.cpu.get(), View(gl.cpu.get()), 0.7f};
            shg = {SG.gpu.get(), SU.gpu.get(), SD.gpu.get(), View(gl.gpu.get()), 0.7f};
          }
          c.cpu.moe_experts(*G.cpu, *U.cpu, *D.cpu, View(x.cpu.get()), View(ids.cpu.get()), View(w.cpu.get()), n, K,
                            View(out.cpu.get()), shc);
          c.gpu.moe_experts(*G.gpu, *U.gpu, *D.gpu, View(x.gpu.get()), View(ids.gpu.get()), View(w.gpu.get()), n, K,
                            View(out.gpu.get()), shg);
          c.expect_close("moe_experts", out, size_t(n) * H, 2e-5f);
        });

  add("argmax", [](Ctx& c) {
    // 5000 logits: three slices of the first pass; ties inside a slice and across slices.
    c.shape = "4 rows of 5000: ties within and across slices, NaNs, all -inf";
    const int n = 4, vocab = 5000;
    std::vector<float> v = c.rng.normals(size_t(n) * vocab);
    v[size_t(vocab) + 10] = v[size_t(vocab) + 500] = v[size_t(vocab) + 4500] = 9.0f;  // the first wins
    v[2 * size_t(vocab) + 4999] = 9.0f;
    v[2 * size_t(vocab) + 3] = NAN;  // never wins
    std::fill_n(&v[2 * size_t(vocab)], 2048, NAN);  // a slice of NaNs only
    std::fill_n(&v[3 * size_t(vocab)], vocab, -INFINITY);
    Pair logits = c.floats(v), ids = c.ints({-1, -1, -1, -1});
    c.cpu.argmax(View(logits.cpu.get()), n, vocab, View(ids.cpu.get()));
    c.gpu.argmax(View(logits.gpu.get()), n, vocab, View(ids.gpu.get()));
    std::vector<int32_t> want(n), got(n);
    c.cpu.read(View(ids.cpu.get()), want.data(), n);
    c.gpu.read(View(ids.gpu.get()), got.data(), n);
    const int32_t expected[] = {-2, 10, 4999, 0};  // row 0: random, so only the backends' agreement
    for (int t = 0; t < n; ++t)
      if (got[size_t(t)] != want[size_t(t)] || (expected[t] >= 0 && want[size_t(t)] != expected[t]))
        throw Failure("argmax row " + std::to_string(t) + ": gpu " + std::to_string(got[size_t(t)]) + ", cpu " +
                      std::to_string(want[size_t(t)]));
  });
  return all;
}

struct KernelReport {
  std::set<std::string> shapes, orders;
  std::string failure;
};

}  // namespace

int main(int argc, char** argv) {
  std::string runtime_name = "emulator", filter;
  std::vector<std::string> orders = {"forward", "reverse", "random"};
  uint32_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--runtime") runtime_name = value();
    else if (a == "--orders") {
      orders.clear();
      std::stringstream s(value());
      for (std::string o; std::getline(s, o, ',');) orders.push_back(o);
    } else if (a == "--seed") seed = uint32_t(std::stoul(value()));
    else if (a == "--filter") filter = value();
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: moelens-gpu-check [--runtime NAME] [--orders forward,reverse,random] [--seed N] [--filter TEXT]\n"
          "Runs every kernel of shaders/*.metal through the GPU backend against the CPU backend on random inputs.\n"
          "Runtimes in this build: %s. Thread orders apply to the emulator.\n",
          gpu::available_runtimes().c_str());
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (runtime_name != "emulator") orders = {"device"};

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<KernelReport> report(gpu::kernels::kCount);
  CpuBackend cpu(1);
  int failed_cases = 0;
  for (const std::string& order : orders) {
    std::unique_ptr<gpu::Runtime> rt;
    try {
      rt = gpu::make_runtime(runtime_name, order, seed);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    GpuBackend gpu_backend(std::move(rt));
    for (const Case& cs : cases()) {
      if (!filter.empty() && cs.name.find(filter) == std::string::npos) continue;
      std::vector<uint64_t> before = gpu_backend.dispatches_by_kernel();
      Ctx ctx{cpu, gpu_backend, Rng(seed * 7919u + uint32_t(std::hash<std::string>()(cs.name))), ""};
      std::string failure;
      try {
        cs.run(ctx);
        gpu_backend.synchronize();
      } catch (const std::exception& e) {
        failure = cs.name + ": " + e.what();
        ++failed_cases;
        try {
          gpu_backend.synchronize();
        } catch (const std::exception&) {
        }
      }
      const std::vector<uint64_t>& after = gpu_backend.dispatches_by_kernel();
      for (size_t k = 0; k < after.size(); ++k) {
        if (after[k] == before[k]) continue;
        report[k].orders.insert(order);
        if (!ctx.shape.empty()) report[k].shapes.insert(ctx.shape);
        if (!failure.empty() && report[k].failure.empty()) report[k].failure = "[" + order + "] " + failure;
      }
      if (!failure.empty()) std::fprintf(stderr, "FAIL [%s] %s\n", order.c_str(), failure.c_str());
    }
  }

  int bad = 0;
  for (int k = 0; k < gpu::kernels::kCount; ++k) {
    const KernelReport& r = report[size_t(k)];
    std::string shapes, ords;
    for (const std::string& s : r.shapes) shapes += (shapes.empty() ? "" : "; ") + s;
    for (const std::string& o : orders)
      if (r.orders.count(o)) ords += (ords.empty() ? "" : ",") + o;
    std::string status = r.orders.empty() ? "NO TEST" : !r.failure.empty() ? "FAIL " + r.failure
                                                       : r.orders.size() < orders.size() ? "NOT RUN IN EVERY ORDER" : "ok";
    if (status != "ok" && filter.empty()) ++bad;
    if (!filter.empty() && r.orders.empty()) continue;
    std::printf("%-18s shapes: %s | orders: %s | %s\n", gpu::kernels::kInfo[k].name, shapes.empty() ? "-" : shapes.c_str(),
                ords.empty() ? "-" : ords.c_str(), status.c_str());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d kernels, %d failing or untested, %d failed cases, runtime %s, %.1f s\n", gpu::kernels::kCount, bad,
              failed_cases, runtime_name.c_str(), secs);
  return bad == 0 && failed_cases == 0 ? 0 : 1;
}
