// Tiled matrix products for prefill chunks (n >= PREFILL_MIN_TOKENS tokens): the projections, the
// router and the lm_head as GEMMs on simdgroup matrices, fp16 operands, fp32 accumulation.
#include <metal_stdlib>
using namespace metal;
#include "tiles.h"

// xh [n, HALF_ROW_LD(cols)] = x [n, cols] rounded to half, zero past cols: the activations of the
// tiled kernels, rounded once for all their tiles (a tile would round each value the same way); with
// p.fragment_order, position c of each 64-column block holds column q4_fragment_column(c) of it. Thread
// i writes run i of 8 halfs (4 words); x may lie at any 4-byte offset (scalar loads, clamped to the row).
[[max_total_threads_per_threadgroup(HALF_ROWS_THREADS)]] kernel void half_rows(device const float* x [[buffer(0)]], device uint* xh [[buffer(1)]],
                      constant HalfRowsParams& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  const uint runs = HALF_ROW_LD(p.cols) / 8u, count = p.n * runs;
  const uint ic = min(i, count - 1u), c = 8u * (ic % runs);
  device const float* row = x + ulong(ic / runs) * p.cols;
  uint col[8];
  for (uint e = 0; e < 8u; ++e) col[e] = p.fragment_order != 0u ? c / GEMM_K * GEMM_K + q4_fragment_column((c + e) % GEMM_K) : c + e;
  float v[8];
  for (uint e = 0; e < 8u; ++e) v[e] = row[min(col[e], p.cols - 1u)];
  for (uint e = 0; e < 8u; ++e) v[e] = col[e] < p.cols ? v[e] : 0.0f;
  if (i < count) {
    device uint* run = xh + 4u * ulong(i);
    for (uint e = 0; e < 4u; ++e) run[e] = half2_bits(v[2u * e], v[2u * e + 1u]);
  }
}

// out_j[t, r] = W_j[r] · x[t] for up to GEMV_MAX_JOBS matrices that read the same x [n, cols] (fused
// projections: one launch), x as half rows (half_rows). Threadgroup (tile, token tile) computes
// GEMM_TILE_TOKENS tokens x GEMM_TILE_ROWS rows of one job; its 4 simdgroups take a 32x32 quarter
// each (2x2). Each K-step copies the x tile and converts the W tile to half in threadgroup memory,
// issues the next step's reads, then multiplies; the epilogue stages each quarter in threadgroup memory, 8 rows at a time, and writes
// whole 128-byte row segments.
[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void gemm(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                 device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                 device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                 device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                 device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                 device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                 device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                 device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                 device const uint4* x [[buffer(16)]], constant GemmParams& p [[buffer(17)]],
                 uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                 uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS, GEMM_K)];
  threadgroup uint4 w_words[TILE_WORDS(GEMM_TILE_ROWS, GEMM_K)];
  threadgroup float staging[4u * 8u * STAGING_LD];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  const uint t0 = GEMM_TILE_TOKENS * group.y;
  const GemmJob job = gemm_job(p, group.x, GEMM_TILE_ROWS, w0, s0, b0, out0, w1, s1, b1, out1, w2, s2, b2, out2, w3, s3, b3, out3);
  const WeightDesc w = job.w;
  threadgroup half* xt = (threadgroup half*)x_words;
  threadgroup half* wt = (threadgroup half*)w_words;
  if (tid < GEMM_TILE_TOKENS) row_of[tid] = min(t0 + tid, p.n - 1u);  // rows past n repeat the last
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint m = sg / 2u, c = sg % 2u;  // this simdgroup's quarter: tokens 32m.., rows 32c..
  simdgroup_float8x8 acc[16];
  for (uint i = 0; i < 16u; ++i) acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const uint ld = HALF_ROW_LD(p.cols);
  const uint runs = TILE_RUNS_PER_THREAD;
  const ActivationRows xrows = activation_rows(ld, row_of, GEMM_K, runs, tid, GEMM_THREADS);
  ActivationRuns xr = fetch_activations(x, ld, xrows, 0u, GEMM_K, runs);
  WeightRuns wr =
      fetch_weights(w, job.data, job.scales, job.biases, job.row0, w.rows, 0u, GEMM_K, tid, true, no_weight_runs(), false);
  for (uint k0 = 0; k0 < p.cols; k0 += GEMM_K) {
    store_activations(xr, xt, GEMM_K, runs, tid, GEMM_THREADS);
    store_weights(wr, w, job.data, job.scales, job.biases, job.row0, w.rows, k0, GEMM_K, wt, tid, true);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads, in flight during the products.
    xr = fetch_activations(x, ld, xrows, k0 + GEMM_K, GEMM_K, runs);
    wr = fetch_weights(w, job.data, job.scales, job.biases, job.row0, w.rows, k0 + GEMM_K, GEMM_K, tid, true, wr, true);
    tile_products(xt, wt, GEMM_K, 32u * m, 32u * c, 4u, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tiles are overwritten by the next step
  }

  threadgroup float* slab = staging + sg * 8u * STAGING_LD;
  const uint row = job.row0 + 32u * c + lane;
  for (uint i = 0; i < 4u; ++i) {
    stage_slab(acc, i, slab);
    for (uint r = 0; r < 8u; ++r) {
      const uint t = t0 + 32u * m + 8u * i + r;
      const float v = slab[r * STAGING_LD + lane];
      if (t < p.n && row < w.rows) job.out[ulong(t) * w.rows + row] = v;
    }
    slab_done();
  }
}

// gemm for launches whose jobs are all MLX 4-bit in groups of 64 with rows a multiple of 8 (chunks
// under GEMM_WIDE_MIN_TOKENS): tiles of GEMM_TILE_TOKENS tokens x Q4_TILE_ROWS rows, each simdgroup's
// 32 rows read straight into its fragments (simdgroup_q4_load) for all the tile's tokens, instead of
// converted into a threadgroup tile that two simdgroups read; the rows' scales and biases staged
// Q4_SCALE_GROUPS groups at a time. Same bindings and results as gemm. `parted` (a constant at each
// call: the gemm_q4_parts build) takes the columns of part z only and writes its sums to `partial`,
// which gemm_parts_sum adds in part order.
inline void gemm_q4_tile(device const uchar* w0, device const uchar* s0, device const uchar* b0, device float* out0,
                         device const uchar* w1, device const uchar* s1, device const uchar* b1, device float* out1,
                         device const uchar* w2, device const uchar* s2, device const uchar* b2, device float* out2,
                         device const uchar* w3, device const uchar* s3, device const uchar* b3, device float* out3,
                         device const uint4* x, constant GemmParams& p, device float* partial, uint3 group, uint tid,
                         uint sg, uint lane, threadgroup uint4* x_words, threadgroup uint* staged,
                         threadgroup uint* row_of, const bool parted) {
  const uint t0 = GEMM_TILE_TOKENS * group.y;
  const uint k_begin = parted ? group.z * p.part_cols : 0u, k_end = parted ? min(p.cols, k_begin + p.part_cols) : p.cols;
  const GemmJob job = gemm_job(p, group.x, Q4_TILE_ROWS, w0, s0, b0, out0, w1, s1, b1, out1, w2, s2, b2, out2, w3, s3, b3, out3);
  const WeightDesc w = job.w;
  threadgroup half* xt = (threadgroup half*)x_words;
  if (tid < GEMM_TILE_TOKENS) row_of[tid] = min(t0 + tid, p.n - 1u);  // rows past n repeat the last
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint r0 = job.row0 + 32u * sg;  // the simdgroup's rows: 4 blocks of 8
  simdgroup_float8x8 acc[32];
  for (uint i = 0; i < 32u; ++i) acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const uint ld = HALF_ROW_LD(p.cols);
  const uint runs = TILE_RUNS_PER_THREAD;
  const ActivationRows xrows = activation_rows(ld, row_of, GEMM_K, runs, tid, GEMM_THREADS);
  ActivationRuns xr = fetch_activations(x, ld, xrows, k_begin, GEMM_K, runs);
  simdgroup_q4_block q[4];
  q4_load_blocks(q, w, job.data, r0, k_begin, 4u, ushort(lane));
  for (uint k0 = k_begin; k0 < k_end; k0 += GEMM_K) {
    const uint step = k0 / GEMM_K, slot = step % Q4_SCALE_GROUPS;  // a part starts a staging (part_cols)
    if (slot == 0u) stage_q4_scales(w, job.scales, job.biases, job.row0, Q4_TILE_ROWS, step, staged, tid, GEMM_THREADS);
    store_activations(xr, xt, GEMM_K, runs, tid, GEMM_THREADS);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads (the last step's again after the last), in flight during the products.
    const uint next = min(k0 + GEMM_K, k_end - GEMM_K);
    xr = fetch_activations(x, ld, xrows, next, GEMM_K, runs);
    simdgroup_q4_block qn[4];
    q4_load_blocks(qn, w, job.data, r0, next, 4u, ushort(lane));
    threadgroup const uint* sb = staged + 2u * (slot * Q4_TILE_ROWS + 32u * sg);
    q4_products(xt, q, sb, sb + 32u, GEMM_TILE_TOKENS / 8u, ushort(lane), acc);
    for (uint j = 0; j < 4u; ++j) q[j] = qn[j];
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tiles are overwritten by the next step
  }

  threadgroup float* slab = (threadgroup float*)staged + sg * 8u * STAGING_LD;
  const uint row = r0 + lane, padded_rows = p.total_tiles * Q4_TILE_ROWS;
  const uint padded_row = Q4_TILE_ROWS * group.x + 32u * sg + lane;
  for (uint i = 0; i < GEMM_TILE_TOKENS / 8u; ++i) {
    stage_slab(acc, i, slab);
    for (uint r = 0; r < 8u; ++r) {
      const uint t = t0 + 8u * i + r;
      const float v = slab[r * STAGING_LD + lane];
      if (t < p.n && row < w.rows) {
        if (parted) partial[(ulong(group.z) * p.n + t) * padded_rows + padded_row] = v;
        else job.out[ulong(t) * w.rows + row] = v;
      }
    }
    slab_done();
  }
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] MIN_RESIDENT_THREADGROUPS(3) kernel void gemm_q4(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                    device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                    device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                    device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                    device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                    device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                    device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                    device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                    device const uint4* x [[buffer(16)]], constant GemmParams& p [[buffer(17)]],
                    uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS, GEMM_K)];
  threadgroup uint staged[2u * Q4_SCALE_GROUPS * Q4_TILE_ROWS];  // then the epilogue's slabs
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  gemm_q4_tile(w0, s0, b0, out0, w1, s1, b1, out1, w2, s2, b2, out2, w3, s3, b3, out3, x, p, out0 /* not written */, group, tid, sg,
               lane, x_words, staged, row_of, false);
}

// gemm_q4 on the columns in parts (grid z): a short chunk's launch of too few threadgroups to fill the
// GPU (an output projection at 512 tokens) in more, shorter ones. A separate build, so that gemm_q4
// keeps its registers and loop.
[[max_total_threads_per_threadgroup(GEMM_THREADS)]] MIN_RESIDENT_THREADGROUPS(3) kernel void gemm_q4_parts(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                    device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                    device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                    device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                    device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                    device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                    device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                    device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                    device const uint4* x [[buffer(16)]], constant GemmParams& p [[buffer(17)]],
                    device float* partial [[buffer(18)]],
                    uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS, GEMM_K)];
  threadgroup uint staged[2u * Q4_SCALE_GROUPS * Q4_TILE_ROWS];  // then the epilogue's slabs
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  gemm_q4_tile(w0, s0, b0, out0, w1, s1, b1, out1, w2, s2, b2, out2, w3, s3, b3, out3, x, p, partial, group, tid, sg,
               lane, x_words, staged, row_of, true);
}

// gemm for long chunks (n >= GEMM_WIDE_MIN_TOKENS): tiles of GEMM_WIDE_TILE tokens x GEMM_WIDE_TILE
// rows, 8 simdgroups of 64 tokens x 32 rows each (2x4), so that each weight tile is converted once for
// twice the tokens and each loaded fragment feeds twice the products. The epilogue stages through the
// activation tile's memory (free after the last K-step).
[[max_total_threads_per_threadgroup(GEMM_WIDE_THREADS)]] kernel void gemm_wide(device const uchar* w0 [[buffer(0)]], device const uchar* s0 [[buffer(1)]],
                      device const uchar* b0 [[buffer(2)]], device float* out0 [[buffer(3)]],
                      device const uchar* w1 [[buffer(4)]], device const uchar* s1 [[buffer(5)]],
                      device const uchar* b1 [[buffer(6)]], device float* out1 [[buffer(7)]],
                      device const uchar* w2 [[buffer(8)]], device const uchar* s2 [[buffer(9)]],
                      device const uchar* b2 [[buffer(10)]], device float* out2 [[buffer(11)]],
                      device const uchar* w3 [[buffer(12)]], device const uchar* s3 [[buffer(13)]],
                      device const uchar* b3 [[buffer(14)]], device float* out3 [[buffer(15)]],
                      device const uint4* x [[buffer(16)]], constant GemmParams& p [[buffer(17)]],
                      uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_WIDE_TILE, GEMM_WIDE_K)];
  threadgroup uint4 w_words[TILE_WORDS(GEMM_WIDE_TILE, GEMM_WIDE_K)];
  threadgroup uint row_of[GEMM_WIDE_TILE];
  const uint t0 = GEMM_WIDE_TILE * group.y;
  const GemmJob job = gemm_job(p, group.x, GEMM_WIDE_TILE, w0, s0, b0, out0, w1, s1, b1, out1, w2, s2, b2, out2, w3, s3, b3, out3);
  const WeightDesc w = job.w;
  threadgroup half* xt = (threadgroup half*)x_words;
  threadgroup half* wt = (threadgroup half*)w_words;
  if (tid < GEMM_WIDE_TILE) row_of[tid] = min(t0 + tid, p.n - 1u);  // rows past n repeat the last
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint m = sg / 4u, c = sg % 4u;  // this simdgroup's block: tokens 64m.., rows 32c..
  simdgroup_float8x8 acc[32];
  for (uint i = 0; i < 32u; ++i) acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const uint ld = HALF_ROW_LD(p.cols);
  const uint runs = GEMM_WIDE_TILE * GEMM_WIDE_K / 8u / uint(GEMM_WIDE_THREADS);
  const ActivationRows xrows = activation_rows(ld, row_of, GEMM_WIDE_K, runs, tid, GEMM_WIDE_THREADS);
  ActivationRuns xr = fetch_activations(x, ld, xrows, 0u, GEMM_WIDE_K, runs);
  WeightRuns wr = fetch_weights(w, job.data, job.scales, job.biases, job.row0, w.rows, 0u, GEMM_WIDE_K, tid, true,
                                no_weight_runs(), false);
  for (uint k0 = 0; k0 < p.cols; k0 += GEMM_WIDE_K) {
    store_activations(xr, xt, GEMM_WIDE_K, runs, tid, GEMM_WIDE_THREADS);
    store_weights(wr, w, job.data, job.scales, job.biases, job.row0, w.rows, k0, GEMM_WIDE_K, wt, tid, true);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads, in flight during the products.
    xr = fetch_activations(x, ld, xrows, k0 + GEMM_WIDE_K, GEMM_WIDE_K, runs);
    wr = fetch_weights(w, job.data, job.scales, job.biases, job.row0, w.rows, k0 + GEMM_WIDE_K, GEMM_WIDE_K, tid, true, wr,
                       true);
    tile_products(xt, wt, GEMM_WIDE_K, 64u * m, 32u * c, 8u, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the tiles are overwritten by the next step
  }

  threadgroup float* slab = (threadgroup float*)x_words + sg * 8u * STAGING_LD;
  const uint row = job.row0 + 32u * c + lane;
  for (uint i = 0; i < 8u; ++i) {
    stage_slab(acc, i, slab);
    for (uint r = 0; r < 8u; ++r) {
      const uint t = t0 + 64u * m + 8u * i + r;
      const float v = slab[r * STAGING_LD + lane];
      if (t < p.n && row < w.rows) job.out[ulong(t) * w.rows + row] = v;
    }
    slab_done();
  }
}

// out_j[t, r] = the sum of a split GEMM's parts for (t, r) (gemm_exact's or gemm_q4_parts', tiles of
// p.tile_rows rows), parts in order. One thread per (token, row of the jobs' tiles); rows past a job's
// matrix are skipped.
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void gemm_parts_sum(device float* out0 [[buffer(0)]], device float* out1 [[buffer(1)]],
                           device float* out2 [[buffer(2)]], device float* out3 [[buffer(3)]],
                           device const float* partial [[buffer(4)]], constant GemmParams& p [[buffer(5)]],
                           uint i [[thread_position_in_grid]]) {
  const uint padded_rows = p.total_tiles * p.tile_rows, count = p.n * padded_rows;
  const uint ic = min(i, count - 1u), t = ic / padded_rows, pr = ic % padded_rows, tile = pr / p.tile_rows;
  const uint j = (p.jobs > 1u && tile >= p.first_tile[1] ? 1u : 0u) + (p.jobs > 2u && tile >= p.first_tile[2] ? 1u : 0u) +
                 (p.jobs > 3u && tile >= p.first_tile[3] ? 1u : 0u);
  const uint rows = j == 0u ? p.w[0].rows : j == 1u ? p.w[1].rows : j == 2u ? p.w[2].rows : p.w[3].rows;
  const uint row = pr - p.tile_rows * (j == 0u ? p.first_tile[0] : j == 1u ? p.first_tile[1] : j == 2u ? p.first_tile[2] : p.first_tile[3]);
  float sum = 0.0f;
  for (uint s = 0; s < p.parts; ++s) sum += partial[(ulong(s) * p.n + t) * padded_rows + pr];
  device float* out = j == 0u ? out0 : j == 1u ? out1 : j == 2u ? out2 : out3;
  if (i < count && row < rows) out[ulong(t) * rows + row] = sum;
}
