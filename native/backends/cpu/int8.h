// The opt-in reduced-precision CPU mode, "int8 activations": for a matmul with an MLX affine 4- or 8-bit
// weight, the activation rows are quantised to int8 in blocks of 32 columns (symmetric: d = max|x| / 127,
// q = round(x / d), half to even) once per call, and each weight row is dotted with them in integer
// arithmetic (AVX-512 VNNI vpdpbusd, AVX2 maddubs / madd, NEON sdot or vmull / vmlal, or scalar).
//
// For a weight group G (w = s·q_w + b, g = 32/64/128 columns) and each 32-column block j inside it:
//     Σ_{k∈j} w_k · (d_j q_xk) = s · d_j · Σ_{k∈j} q_wk q_xk + b · d_j · Σ_{k∈j} q_xk
// so the row's result is Σ_G [ s_G · Σ_{j∈G} d_j · I_j + b_G · B_G ] with I_j an exact integer sum and
// B_G = Σ_{j∈G} d_j · Σ q_x computed once per activation row. Both terms use the quantised activations:
// the result is the dot product of the dequantised weight row with the dequantised activations, up to
// fp32 rounding (summation order differs between the SIMD kernels and the scalar reference, nothing else).
// The approximation is the activation rounding alone, |x - d·q| <= d/2 per element.
//
// Two more modes quantise the activations finer and split q into int8 planes, balanced base-128 digits:
// "int16" (d = max|x| / 16256, q = 128·h + l) and "int24" (d = max|x| / 2080768, q = 16384·h + 128·m + l),
// the top digit within ±127, the others within ±64. The same u8 x s8 kernels run once per plane and
// combine Σ_p 128^(planes-1-p) I_p exactly in int32. Each plane divides int8's rounding error by 128:
// int24's, at most 2.4e-7 of a block's largest activation, is of the order of fp32's own rounding, and
// the int24 mode passes the same parity tests as fp32 (test/parity.test.ts) for three dot
// instructions per weight vector instead of fp32's dequantisation and FMA per weight. CpuBackend runs
// int24 in decode (one activation row) only; its prefill keeps the fp32 tiles, which are as fast.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dot.h"

namespace moelens::cpu {

// What the CPU backend computes quantised matmuls with: fp32 activations (exact, the reference path
// that the parity tests check; the default), or int8 / int16 / int24 activations (this file).
enum class Precision { F32, Int8, Int16, Int24 };
const char* precision_name(Precision p);  // "fp32", "int8", "int16", "int24"
bool parse_precision(const std::string& name, Precision* out);

// Whether the int8 kernels take `w`: MLX affine 4- or 8-bit with a power-of-two group size >= 32.
// Anything else (dense F32/F16/BF16 weights, other group sizes) stays on the fp32 path in int8 mode.
bool int8_supported(const LinearWeight& w);

// Which kernels this build runs: "avx512-vnni", "avx2", "neon-dotprod", "neon" or "scalar".
const char* int8_kernel_name();

// n activation rows quantised for the weights of one (bits, group size, cols) layout, in one int8 plane
// (precision int8), two (int16) or three (int24).
//
// Kernel column order (`qk`, per chunk: its planes in turn, most significant first): for 4-bit weights, per 128 columns the 64 even columns then the 64 odd
// ones (a packed byte holds an even column in its low nibble and the next odd one in its high nibble, so
// one 64-byte load unpacked with masks and a shift meets two 64-byte activation vectors); for 8-bit, the
// natural order. Rows are zero-padded to whole chunks (128 columns for 4-bit, 64 for 8-bit). With that
// order, int32 lane l (of 16) of a 512-bit vpdpbusd over chunk c sums products of one block:
// 4c + l/4 (4-bit) or 2c + l/8 (8-bit); `dlane` holds that block's d per lane. For 4-bit, the VNNI row
// kernel takes whole chunks four at a time (a quad, 512 columns) and sums each block's four lanes
// first, so that lane 4L + i holds block L of the quad's chunk i: `dquad` holds the d of that block.
struct Int8Input {
  int n = 0;
  int planes = 1;
  int64_t cols = 0;
  int bits = 0, group_size = 0;
  int64_t blocks = 0;   // cols / 32
  int64_t chunks = 0;   // per row
  int64_t quads = 0;    // 4-bit: whole chunks / 4
  int64_t kstride = 0;  // bytes per row of qk: chunks * chunk columns * planes
  int64_t gstride = 0;  // floats per row of bsum: groups rounded up to 16 (zero padded)
  int gshift = 0;       // log2(group_size)
  // For groups narrower than a chunk: the group of each int32 lane relative to the chunk's first group.
  int32_t lane_group[16] = {};
  std::vector<int32_t> q;    // [n, cols] natural order: x̂ = d·q
  std::vector<int8_t> qk;    // [n, kstride] kernel order
  std::vector<float> d;      // [n, blocks] block scales
  std::vector<float> dlane;  // [n, chunks * 16]
  std::vector<float> dquad;  // 4-bit: [n, quads * 16], quads = whole chunks / 4
  std::vector<float> bsum;   // [n, gstride]: B_G = Σ_{j∈G} d_j Σ q

  // Prefill (AVX-512 VNNI builds): the rows again with 16 tokens to a vector, k-major (for each dword of
  // the kernel-order row, the 16 tokens' dwords; tokens past n are zero), and the tokens' block scales
  // and bias sums likewise, so that a tile broadcasts 4 weights against 16 tokens per vpdpbusd.
  std::vector<int32_t> packed;     // [token blocks][kstride / 4][16]
  std::vector<float> packed_d;     // [token blocks][blocks][16]
  std::vector<float> packed_bsum;  // [token blocks][gstride][16]
  // Per 32-column block, its 8 dwords of 4 columns: in a kernel-order row of plane 0 (plane 1 sits a
  // chunk-plane further), and as byte offsets in a row of weights unpacked to one byte each.
  std::vector<int32_t> block_xoff, block_woff;  // [blocks][8]

  // Sizes the buffers for n rows against `w`; then quantize_row fills each row (rows are independent,
  // so callers may fill them in parallel), and pack() the packed copies once all rows are in.
  void init(const LinearWeight& w, int rows, int planes = 1);
  void quantize_row(const float* x, int t);
  void pack();
  // Whether several rows go to the prefill tiles (one or two planes; three planes, int24, have none).
  bool tiled() const { return n > 1 && planes <= 2; }
  // Whether these activations suit `w` as well (same bits, group size and columns).
  bool fits(const LinearWeight& w) const { return w.bits == bits && w.group_size == group_size && w.cols == cols; }
};
// init + quantize_row for every row of x[n, w.cols], then pack.
void quantize_input(const LinearWeight& w, const float* x, int n, Int8Input* out, int planes = 1);
// Activation planes of a precision: 1 for int8, 2 for int16, 3 for int24 (0 for fp32).
inline int activation_planes(Precision p) {
  return p == Precision::Int8 ? 1 : p == Precision::Int16 ? 2 : p == Precision::Int24 ? 3 : 0;
}

// y[r - r0] = Σ_i ŵ_r[i] · x̂[i] for rows r0 .. r1-1 of expert `expert` and row t of `in` (ŵ, x̂
// dequantised), with the fastest kernel of this build, chosen once for the range (decode's short expert
// rows pay no per-row dispatch or set-up).
void dot_rows_int8(const LinearWeight& w, int64_t expert, int64_t r0, int64_t r1, const Int8Input& in, float* y, int t = 0);
// The same in plain scalar code over the natural-order activations: the reference the SIMD kernels are
// tested against, and the fallback where no SIMD kernel applies.
float dot_row_int8_reference(const LinearWeight& w, const Row& row, const Int8Input& in, int t = 0);

// Prefill: y[t * ldy + r0 + r] for rows r0 .. r0+nr-1 of expert `expert` and every row t of `in`
// (packed). With VNNI and one or two planes, tiles of up to 8 rows are unpacked to bytes once and each
// 4 of their weights broadcast against 16 tokens; elsewhere the row kernel runs per token (int24 has
// no tiles: three planes would make them no faster than the exact fp32 ones, which CpuBackend uses).
void gemm_int8(const LinearWeight& w, int64_t expert, int64_t r0, int nr, const Int8Input& in, float* y, int64_t ldy);

}  // namespace moelens::cpu
