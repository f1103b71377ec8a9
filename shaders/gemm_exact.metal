// The exact matrix product for prefill chunks: jobs that must stay fp32 (MatmulJob::exact, the router
// and the shared-expert gate, whose top-k choices a rounding error may flip) as a tiled GEMM to fp32
// accuracy, instead of one GEMV pass per token. Matrix units take no fp32 operands in the portable
// subset, so each operand is split into two halfs and three fp16 products are summed in fp32.
#include <metal_stdlib>
using namespace metal;
#include "tiles.h"

#define EXACT_RUNS_PER_THREAD (GEMM_EXACT_TILE * GEMM_EXACT_K / 8u / uint(GEMM_EXACT_THREADS))
#define EXACT_RUNS_PER_ROW (GEMM_EXACT_K / 8u)

// A thread's reads of one K-step, kept raw so that they are in flight during the step before: columns
// c .. c+7 of its x row and of its weight row (clamped to the row; masked when stored). Quantized: w[0],
// w[1] the words of the values (q4: w[0]), w[2] and w[3] the words of the group's scale and bias; bf16
// and f16: the 8 values' bits; f32: the 8 values' bits.
struct ExactRun {
  float x[8];
  uint w[8];
};

inline ExactRun exact_fetch(thread const WeightDesc& w, device const uchar* data, device const uchar* scales,
                            device const uchar* biases, ulong row, device const float* xrow, uint cols, uint c) {
  ExactRun r;
  for (uint e = 0; e < 8u; ++e) r.x[e] = xrow[min(c + e, cols - 1u)];
  device const uchar* row_data = data + row * w.row_bytes;
  const bool q4 = w.format == WEIGHT_Q4;
  if (q4 || w.format == WEIGHT_Q8) {
    const uint words = w.row_bytes / 4u, wi = min(c / (q4 ? 8u : 4u), words - 1u), group = wi >> w.group_shift;
    r.w[0] = ((device const uint*)row_data)[wi];
    r.w[1] = ((device const uint*)row_data)[min(wi + 1u, words - 1u)];
    r.w[2] = load_scale_word(scales + row * w.scale_row_bytes, group, w.scale_type);
    r.w[3] = load_scale_word(biases + row * w.scale_row_bytes, group, w.scale_type);
    for (uint e = 4u; e < 8u; ++e) r.w[e] = 0u;
  } else if (w.format == WEIGHT_F32) {
    for (uint e = 0; e < 8u; ++e) r.w[e] = as_type<uint>(((device const float*)row_data)[min(c + e, w.cols - 1u)]);
  } else {
    for (uint e = 0; e < 8u; ++e) r.w[e] = uint(((device const ushort*)row_data)[min(c + e, w.cols - 1u)]);
  }
  return r;
}

// The fetched run dequantised in fp32 (scale·q + bias per MLX affine group: a run of 8 lies in one
// group), zero past the row.
inline void exact_weights(thread const ExactRun& r, thread const WeightDesc& w, uint c, thread float* v) {
  const bool q4 = w.format == WEIGHT_Q4;
  if (q4 || w.format == WEIGHT_Q8) {
    const uint group = min(c / (q4 ? 8u : 4u), w.row_bytes / 4u - 1u) >> w.group_shift;
    const float sc = scale_in_word(r.w[2], group, w.scale_type), bi = scale_in_word(r.w[3], group, w.scale_type);
    for (uint e = 0; e < 8u; ++e) {
      const float q = q4 ? unpack(r.w[0], 4u * e, 15u) : unpack(e < 4u ? r.w[0] : r.w[1], 8u * (e & 3u), 255u);
      v[e] = c + e < w.cols ? sc * q + bi : 0.0f;
    }
  } else {
    for (uint e = 0; e < 8u; ++e) {
      const ushort bits = ushort(r.w[e] & 0xffffu);
      const float value = w.format == WEIGHT_F32 ? as_type<float>(r.w[e])
                          : w.format == WEIGHT_BF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
      v[e] = c + e < w.cols ? value : 0.0f;
    }
  }
}

// v[0..7] split into halfs, v ≈ hi + lo: hi = v rounded to half, lo = the rest rounded to half, so that
// hi + lo keeps about 22 of v's 24 significant bits (lo may be subnormal: its absolute error is then
// 2^-25 at most). Values of magnitude 65,520 and above have no half (the prompt path's other GEMMs
// read the same activations as halfs, so they are bounded so anyway).
inline void store_split_run(threadgroup half* hi, threadgroup half* lo, thread const float* v) {
  uint h[4], l[4];
  for (uint e = 0; e < 4u; ++e) {
    const float a = v[2u * e], b = v[2u * e + 1u];
    const float ha = float(half(a)), hb = float(half(b));
    h[e] = half2_bits(ha, hb);
    l[e] = half2_bits(a - ha, b - hb);  // a − ha is exact: a and half(a) share the top bits
  }
  store_words(hi, uint4(h[0], h[1], h[2], h[3]));
  store_words(lo, uint4(l[0], l[1], l[2], l[3]));
}

// out_j[t, r] = W_j[r] · x[t] to fp32 accuracy for up to GEMV_MAX_JOBS matrices that read the same x
// [n, cols], the row tiles of all jobs numbered consecutively (GemmParams, tiles of GEMM_EXACT_TILE
// rows). With p.parts > 1, threadgroup z takes columns z·part_cols .. and writes its sums to
// partial [parts, n, total_tiles · GEMM_EXACT_TILE] (rows numbered across the jobs' tiles) for
// gemm_parts_sum.
// On the matrix units: x and the dequantised W (fp32) are each split into two halfs (store_split_run)
// and x·w = x_hi·w_hi + x_hi·w_lo + x_lo·w_hi, three fp16 products accumulated in fp32 (the dropped
// x_lo·w_lo is under 2^-24 of x·w): the error of each product is that of an fp32 one, and the sums are
// fp32 sums in another order than the CPU's.
// Threadgroup (row tile, token tile, part): GEMM_EXACT_TILE tokens x GEMM_EXACT_TILE rows on
// 4 simdgroups of 32x32 (2x2), as gemm's. Each K-step stores the split x and W tiles ([token][k],
// [row][k]), issues the next step's reads, then multiplies.
[[max_total_threads_per_threadgroup(GEMM_EXACT_THREADS)]] MIN_RESIDENT_THREADGROUPS(4) kernel void gemm_exact(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                       device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                       device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                       device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                       device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                       device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                       device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                       device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                       device const float* x [[buffer(16)]], device float* partial [[buffer(17)]],
                       constant GemmParams& p [[buffer(18)]], uint3 group [[threadgroup_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
  // x_hi, x_lo, w_hi, w_lo; then the epilogue's slabs.
  threadgroup uint4 tile_words[4u * TILE_WORDS(GEMM_EXACT_TILE, GEMM_EXACT_K)];
  threadgroup half* x_hi = (threadgroup half*)tile_words;
  threadgroup half* x_lo = x_hi + GEMM_EXACT_TILE * TILE_LD(GEMM_EXACT_K);
  threadgroup half* w_hi = x_lo + GEMM_EXACT_TILE * TILE_LD(GEMM_EXACT_K);
  threadgroup half* w_lo = w_hi + GEMM_EXACT_TILE * TILE_LD(GEMM_EXACT_K);
  const uint tile = group.x, t0 = GEMM_EXACT_TILE * group.y;
  const GemmJob job = gemm_job(p, tile, GEMM_EXACT_TILE, w0, s0, b0, out0, w1, s1, b1, out1, w2, s2, b2, out2, w3, s3, b3, out3);
  const WeightDesc w = job.w;
  const uint row0 = job.row0;

  // Loading: run i of thread tid is tile row (tid + threads·i) / EXACT_RUNS_PER_ROW, its run of 8
  // columns (tid + threads·i) % EXACT_RUNS_PER_ROW of each K-step, read a step ahead, so that a
  // simdgroup's reads cover 8 rows (a cache line of each) rather than a word of 32 rows; rows past the
  // matrix or the chunk repeat the last one (their outputs are not stored).
  uint load_row[EXACT_RUNS_PER_THREAD], first_col[EXACT_RUNS_PER_THREAD];
  device const float* xrow[EXACT_RUNS_PER_THREAD];
  ulong wrow[EXACT_RUNS_PER_THREAD];
#pragma unroll
  for (uint i = 0; i < EXACT_RUNS_PER_THREAD; ++i) {
    const uint q = tid + uint(GEMM_EXACT_THREADS) * i;
    load_row[i] = q / EXACT_RUNS_PER_ROW;
    first_col[i] = 8u * (q % EXACT_RUNS_PER_ROW);
    xrow[i] = x + ulong(min(t0 + load_row[i], p.n - 1u)) * p.cols;
    wrow[i] = ulong(min(row0 + load_row[i], w.rows - 1u));
  }
  const uint m = sg / 2u, c = sg % 2u;  // this simdgroup's quarter: tokens 32m.., rows 32c..
  simdgroup_float8x8 acc[16];
  for (uint i = 0; i < 16u; ++i) acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const uint k_begin = group.z * p.part_cols, k_end = min(p.cols, k_begin + p.part_cols);
  ExactRun r[EXACT_RUNS_PER_THREAD];
#pragma unroll
  for (uint i = 0; i < EXACT_RUNS_PER_THREAD; ++i)
    r[i] = exact_fetch(w, job.data, job.scales, job.biases, wrow[i], xrow[i], p.cols, k_begin + first_col[i]);
  for (uint k0 = k_begin; k0 < k_end; k0 += GEMM_EXACT_K) {
#pragma unroll
    for (uint i = 0; i < EXACT_RUNS_PER_THREAD; ++i) {
      const uint run_col = k0 + first_col[i], at = load_row[i] * TILE_LD(GEMM_EXACT_K) + first_col[i];
      float xv[8], wv[8];
      for (uint e = 0; e < 8u; ++e) xv[e] = run_col + e < p.cols ? r[i].x[e] : 0.0f;
      exact_weights(r[i], w, run_col, wv);
      store_split_run(x_hi + at, x_lo + at, xv);
      store_split_run(w_hi + at, w_lo + at, wv);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads, in flight during the products (after the last: clamped, unused).
#pragma unroll
    for (uint i = 0; i < EXACT_RUNS_PER_THREAD; ++i)
      r[i] = exact_fetch(w, job.data, job.scales, job.biases, wrow[i], xrow[i], p.cols, k0 + GEMM_EXACT_K + first_col[i]);
    tile_products(x_hi, w_hi, GEMM_EXACT_K, 32u * m, 32u * c, 4u, acc);
    tile_products(x_hi, w_lo, GEMM_EXACT_K, 32u * m, 32u * c, 4u, acc);
    tile_products(x_lo, w_hi, GEMM_EXACT_K, 32u * m, 32u * c, 4u, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tiles are overwritten by the next step
  }

  threadgroup float* slab = (threadgroup float*)tile_words + sg * 8u * STAGING_LD;
  const uint padded_rows = p.total_tiles * GEMM_EXACT_TILE, local = 32u * c + lane, row = row0 + local;
  for (uint i = 0; i < 4u; ++i) {
    stage_slab(acc, i, slab);
    for (uint e = 0; e < 8u; ++e) {
      const uint t = t0 + 32u * m + 8u * i + e;
      const float v = slab[e * STAGING_LD + lane];
      if (t < p.n && row < w.rows) {
        if (p.parts > 1u) partial[(ulong(group.z) * p.n + t) * padded_rows + GEMM_EXACT_TILE * tile + local] = v;
        else job.out[ulong(t) * w.rows + row] = v;
      }
    }
    slab_done();
  }
}
