// moelens-dot-test: the CPU backend's SIMD row kernels (whichever this build compiled: AVX-512, AVX2,
// NEON or scalar) against a plain scalar reference, on random rows of every stored format, and the
// int8-activation kernels (int8.h: decode rows and prefill tiles) against their scalar reference.
// Prints one line per case and exits non-zero on any mismatch. Used by `npm test` and, cross-compiled,
// under qemu for the arm64 (NEON) build; on x86-64 the build also makes moelens-dot-test-avx2 and
// moelens-dot-test-scalar, the same test compiled without AVX-512 or without AVX.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/activations.h"
#include "backends/cpu/dot.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/int8.h"

using namespace moelens;
using namespace moelens::cpu;

namespace {

struct Case {
  DType dtype;
  int bits, group_size, cols;
  DType scales = DType::BF16;
};

// Random scales and biases in the given dtype, negative scales too.
void fill_scales(std::mt19937& rng, DType dtype, std::vector<uint8_t>* scales, std::vector<uint8_t>* biases) {
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const size_t es = dtype_size(dtype);
  for (size_t i = 0; i < scales->size(); i += es) {
    const float s = 0.05f * uni(rng), b = 0.3f * uni(rng);
    if (dtype == DType::F32) {
      std::memcpy(&(*scales)[i], &s, 4);
      std::memcpy(&(*biases)[i], &b, 4);
    } else if (dtype == DType::BF16) {
      const uint16_t hs = f32_to_bf16(s), hb = f32_to_bf16(b);
      std::memcpy(&(*scales)[i], &hs, 2);
      std::memcpy(&(*biases)[i], &hb, 2);
    } else {  // F16: magnitudes 2^-7..2^-6 and 2^-4..2^-3, random signs
      const uint16_t hs = uint16_t(0x2000 | (rng() & 0x3ff) | ((rng() & 1) << 15));
      const uint16_t hb = uint16_t(0x2c00 | (rng() & 0x3ff) | ((rng() & 1) << 15));
      std::memcpy(&(*scales)[i], &hs, 2);
      std::memcpy(&(*biases)[i], &hb, 2);
    }
  }
}

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

// The int8-activation kernels on one weight layout (planes 1: precision int8; 2: int16; 3: int24): for every row and token,
//   kernel   dot_row_int8 (this build's SIMD) and gemm_int8 (prefill tiles) vs dot_row_int8_reference,
//   identity the reference vs Σ ŵ·x̂ in double (dequantised weights times dequantised activations),
// both within fp32 rounding: 1e-5 of Σ|ŵ·x̂|. Also prints the activation rounding error
// |Σ ŵ·x̂ - Σ ŵ·x| / Σ|ŵ·x| (what the mode approximates).
uint64_t int8_digest = 14695981039346656037ull;  // FNV-1a over every case's q and d

// The prefill tile kernel against double sums: tokens packed (16 to a block, the last block partial) and
// a tile with fewer rows than kGemmRows, whose spare rows hold values that must not reach y.
int gemm_case(std::mt19937& rng, int rows, int n, int cols) {
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> w(size_t(kGemmRows) * cols), x(size_t(n) * cols);
  for (float& v : w) v = uni(rng);
  for (float& v : x) v = uni(rng);
  PackedTokens xp;
  pack_tokens(x.data(), n, cols, false, &xp);
  const int ldy = rows + 3, r0 = 2;  // y rows wider than the tile, tile placed inside
  std::vector<float> y(size_t(n) * ldy, -7.f);
  gemm_tile(w.data(), rows, xp, y.data(), ldy, r0);
  double worst = 0;
  bool outside_ok = true;
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < ldy; ++c) {
      const float got = y[size_t(t) * ldy + c];
      const int r = c - r0;
      if (r < 0 || r >= rows) {
        outside_ok = outside_ok && got == -7.f;
        continue;
      }
      double want = 0;
      for (int k = 0; k < cols; ++k) want += double(w[size_t(r) * cols + k]) * x[size_t(t) * cols + k];
      worst = std::max(worst, std::fabs(got - want));
    }
  const bool ok = worst <= 1e-5 * cols && outside_ok;
  std::printf("%-6s gemm rows=%d tokens=%-3d cols=%-4d max|err|=%.2e%s %s\n", simd_name(), rows, n, cols, worst,
              outside_ok ? "" : " (wrote outside the tile)", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

// silu over arrays (the SIMD exponential) against silu in double: within 4 ulp where the result is a
// normal float, the same infinities and NaNs, and within 1e-30 where it underflows.
int silu_case() {
  std::vector<float> x;
  for (float v = -110.f; v <= 110.f; v += 0.0037f) x.push_back(v);
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 88.f, -88.f, 89.f, -89.f, 104.f, -104.f, 200.f, -200.f, INFINITY, -INFINITY, NAN})
    x.push_back(v);
  std::vector<float> y = x;
  silu_inplace(y.data(), int64_t(y.size()));
  double worst = 0;
  bool special_ok = true;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = double(x[i]) / (1.0 + std::exp(-double(x[i])));
    if (std::isnan(want) || std::isinf(want)) {
      special_ok = special_ok && (std::isnan(want) ? std::isnan(y[i]) : y[i] == float(want));
    } else if (std::fabs(want) < 1e-30) {
      special_ok = special_ok && std::fabs(y[i] - want) <= 1e-30;
    } else {
      const double ulp = std::fabs(double(std::nextafter(float(want), INFINITY)) - double(float(want)));
      worst = std::max(worst, std::fabs(double(y[i]) - want) / ulp);
    }
  }
  const bool ok = worst <= 4.0 && special_ok;
  std::printf("%-6s silu over %zu values: worst %.2f ulp, infinities/NaN/underflow %s %s\n", simd_name(), x.size(), worst,
              special_ok ? "as expf" : "DIFFER", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

// Attention's weighted sum of value rows (strided, as in the KV cache) against double sums.
int weighted_rows_case(std::mt19937& rng, int count, int dim) {
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const int stride = dim + 48;
  std::vector<float> p(static_cast<size_t>(count)), rows(size_t(count) * stride), out(size_t(dim) + 1, -7.f);
  for (float& v : p) v = uni(rng);
  for (float& v : rows) v = uni(rng);
  weighted_rows_sum(p.data(), rows.data(), stride, count, dim, out.data());
  double worst = 0;
  for (int d = 0; d < dim; ++d) {
    double want = 0;
    for (int j = 0; j < count; ++j) want += double(p[size_t(j)]) * rows[size_t(j) * stride + d];
    worst = std::max(worst, std::fabs(out[size_t(d)] - want));
  }
  const bool ok = worst <= 1e-5 * count && out[size_t(dim)] == -7.f;
  std::printf("%-6s weighted rows count=%-3d dim=%-3d max|err|=%.2e %s\n", simd_name(), count, dim, worst, ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

int int8_case(std::mt19937& rng, int planes, int bits, int group_size, int cols, DType scale_dtype) {
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const int rows = 9, tokens = 7, most_tokens = 37;
  LinearWeight w;
  w.name = "int8";
  w.rows = rows;
  w.cols = cols;
  w.dtype = DType::U32;
  w.bits = bits;
  w.group_size = group_size;
  w.scale_dtype = scale_dtype;
  std::vector<uint8_t> data(size_t(rows) * w.row_bytes()), scales(size_t(rows) * w.scale_row_bytes()), biases(scales.size());
  for (auto& b : data) b = uint8_t(rng());
  fill_scales(rng, scale_dtype, &scales, &biases);
  w.data = {data.data()};
  w.scales = {scales.data()};
  w.biases = {biases.data()};
  // Activations with a different magnitude per 32-column block, one all-zero block, and exact ties.
  std::vector<float> x(size_t(most_tokens) * cols);
  for (int t = 0; t < most_tokens; ++t)
    for (int j = 0; j < cols / 32; ++j) {
      const float mag = (t + j) % 5 == 3 ? 0.f : std::pow(4.f, float(int(rng() % 7) - 3));
      for (int k = 0; k < 32; ++k) x[size_t(t) * cols + j * 32 + k] = mag * uni(rng);
      if (mag > 0.f) x[size_t(t) * cols + j * 32 + 5] = mag, x[size_t(t) * cols + j * 32 + 6] = -0.5f * mag / 127.f * 3.f;
    }
  Int8Input in;
  quantize_input(w, x.data(), tokens, &in, planes);
  double kernel = 0, identity = 0, tiles = 0, quant = 0;
  // Prefill tiles of 1-9 rows (9: more than one tile holds) over 7, 6 and 37 tokens (one part-filled
  // block of 16 tokens, and two full ones and a part-filled one).
  for (int n : {tokens, tokens - 1, most_tokens}) {
    Int8Input part;
    quantize_input(w, x.data(), n, &part, planes);
    for (int nr = 1; nr <= rows; ++nr) {
      std::vector<float> y(size_t(n) * rows, NAN);
      for (int r0 = 0; r0 < rows; r0 += nr) gemm_int8(w, 0, r0, std::min(nr, rows - r0), part, y.data(), rows);
      std::vector<float> wr(static_cast<size_t>(cols));
      for (int r = 0; r < rows; ++r)
        for (int t = 0; t < n; ++t) {
          dequantize_row(w, row_of(w, 0, r), wr.data());
          const double ref = dot_row_int8_reference(w, row_of(w, 0, r), part, t);
          double mag = 0;
          for (int i = 0; i < cols; ++i) mag += std::fabs(double(wr[size_t(i)]) * part.d[size_t(t) * part.blocks + i / 32] * part.q[size_t(t) * cols + i]);
          const double e = std::fabs(y[size_t(t) * rows + r] - ref) / (mag > 0 ? mag : 1);
          tiles = std::isnan(e) ? INFINITY : std::max(tiles, e);
        }
    }
  }
  // The decode row kernel over ranges of 3 rows (ranges that start past row 0 and a short last one).
  std::vector<float> krows(size_t(tokens) * rows, NAN);
  for (int t = 0; t < tokens; ++t)
    for (int r0 = 0; r0 < rows; r0 += 3) dot_rows_int8(w, 0, r0, std::min(r0 + 3, rows), in, &krows[size_t(t) * rows + r0], t);
  std::vector<float> deq(static_cast<size_t>(cols));
  for (int r = 0; r < rows; ++r) {
    const Row row = row_of(w, 0, r);
    dequantize_row(w, row, deq.data());
    for (int t = 0; t < tokens; ++t) {
      const float* xt = &x[size_t(t) * cols];
      double exact = 0, mag = 0, fp = 0, fmag = 0;
      for (int i = 0; i < cols; ++i) {
        const double xh = double(in.d[size_t(t) * in.blocks + i / 32]) * in.q[size_t(t) * cols + i];
        exact += double(deq[size_t(i)]) * xh;
        mag += std::fabs(double(deq[size_t(i)]) * xh);
        fp += double(deq[size_t(i)]) * xt[i];
        fmag += std::fabs(double(deq[size_t(i)]) * xt[i]);
      }
      const double ref = dot_row_int8_reference(w, row, in, t);
      const double scale = mag > 0 ? mag : 1;
      const double e = std::fabs(krows[size_t(t) * rows + r] - ref) / scale;
      kernel = std::isnan(e) ? INFINITY : std::max(kernel, e);
      identity = std::max(identity, std::fabs(ref - exact) / scale);
      quant = std::max(quant, std::fabs(exact - fp) / (fmag > 0 ? fmag : 1));
    }
  }
  // The quantised activations must not depend on the ISA: every build variant prints the same digest.
  for (int32_t v : in.q) int8_digest = (int8_digest ^ uint32_t(v)) * 1099511628211ull;
  for (int8_t v : in.qk) int8_digest = (int8_digest ^ uint8_t(v)) * 1099511628211ull;
  for (float v : in.d) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    int8_digest = (int8_digest ^ u) * 1099511628211ull;
  }
  const bool ok = kernel <= 1e-5 && tiles <= 1e-5 && identity <= 1e-5 && quant < 2e-2;
  std::printf("%-11s %-5s bits=%d group=%-3d cols=%-4d scales=%-4s kernel %.1e tile %.1e identity %.1e (of sum|w*x|), "
              "activation rounding %.1e %s\n",
              int8_kernel_name(), planes == 3 ? "int24" : planes == 2 ? "int16" : "int8", bits, group_size, cols, dtype_name(scale_dtype), kernel, tiles, identity, quant, ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const Case cases[] = {
      {DType::U32, 4, 64, 2048}, {DType::U32, 4, 32, 512}, {DType::U32, 4, 128, 1024}, {DType::U32, 4, 8, 96},
      {DType::U32, 4, 64, 64},   {DType::U32, 4, 32, 192},  {DType::U32, 4, 64, 576},   {DType::U32, 4, 32, 32},
      {DType::U32, 4, 32, 576},  {DType::U32, 4, 64, 2112, DType::F16}, {DType::U32, 4, 128, 2304, DType::F32},
      {DType::U32, 8, 64, 512, DType::F16},
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
    w.scale_dtype = c.scales;
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
      fill_scales(rng, c.scales, &scales, &biases);
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
    // A few tokens against each row at once (prefill of a matrix that sees few tokens).
    for (const int tokens : {3, kRowTokens}) {
      std::vector<std::vector<float>> xs(size_t(tokens), std::vector<float>(size_t(c.cols)));
      std::vector<PreparedInput> ins(static_cast<size_t>(tokens));
      for (int t = 0; t < tokens; ++t) {
        for (float& v : xs[size_t(t)]) v = uni(rng);
        prepare_input(w, xs[size_t(t)].data(), &ins[size_t(t)]);
      }
      float out[kRowTokens];
      for (int r = 0; r < rows; ++r) {
        dot_row_tokens(w, row_of(w, 0, r), ins.data(), tokens, out);
        for (int t = 0; t < tokens; ++t)
          worst = std::max(worst, std::fabs(out[t] - reference(w, row_of(w, 0, r), xs[size_t(t)].data())));
      }
    }
    // Rows against their own activations, weighted and summed (the MoE down projection of one token).
    {
      std::vector<std::vector<float>> xs(rows, std::vector<float>(size_t(c.cols)));
      std::vector<PreparedInput> ins(static_cast<size_t>(rows));
      std::vector<Row> rs;
      std::vector<float> weights;
      double want = 0;
      for (int r = 0; r < rows; ++r) {
        for (float& v : xs[size_t(r)]) v = uni(rng);
        prepare_input(w, xs[size_t(r)].data(), &ins[size_t(r)]);
        rs.push_back(row_of(w, 0, r));
        weights.push_back(uni(rng));
        want += weights.back() * reference(w, rs.back(), xs[size_t(r)].data());
      }
      worst = std::max(worst, std::fabs(dot_rows_weighted(w, rs.data(), ins.data(), weights.data(), rows) - want));
    }
    const double tol = 1e-5 * c.cols;
    const bool ok = worst <= tol;
    failures += !ok;
    std::printf("%-6s %-4s bits=%d group=%-3d cols=%-4d scales=%-4s max|err|=%.2e %s\n", simd_name(), dtype_name(c.dtype),
                c.bits, c.group_size, c.cols, w.quantized() ? dtype_name(c.scales) : "-", worst, ok ? "ok" : "FAIL");
  }
  struct Int8Case {
    int bits, group_size, cols;
    DType scales;
  };
  const Int8Case int8_cases[] = {
      {4, 64, 2048, DType::BF16}, {4, 32, 512, DType::BF16}, {4, 128, 1024, DType::BF16}, {4, 64, 64, DType::BF16},
      {4, 32, 96, DType::BF16},   {4, 64, 192, DType::F16},  {4, 128, 384, DType::F32},  {8, 64, 2048, DType::BF16},
      {8, 32, 512, DType::BF16},  {8, 32, 96, DType::F16},   {8, 128, 256, DType::F32},  {8, 64, 64, DType::BF16},
      // 4-bit rows of whole quads (512 columns) followed by chunks: every scale type in the quad kernel
      {4, 64, 1216, DType::F16},  {4, 128, 640, DType::F32}, {4, 32, 1568, DType::BF16},
  };
  for (int planes : {1, 2, 3})
    for (const Int8Case& c : int8_cases) failures += int8_case(rng, planes, c.bits, c.group_size, c.cols, c.scales);
  for (const int rows : {kGemmRows, 5})
    for (const int n : {1, 3, 16, 17, 40})
      for (const int cols : {64, 576}) failures += gemm_case(rng, rows, n, cols);
  for (const int dim : {16, 64, 200, 256}) failures += weighted_rows_case(rng, 37, dim);
  failures += silu_case();
  std::printf("int8 activations digest %016llx\n", static_cast<unsigned long long>(int8_digest));
  std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
