// Mixture of experts for prefill chunks (n >= PREFILL_MIN_TOKENS tokens): the chunk's (token, slot)
// entries bucketed by expert on the device, then grouped GEMMs over the buckets on simdgroup matrices
// (fp16 operands, fp32 accumulation), so that each expert's weights are read once per chunk, and a
// combine in slot order. The shared expert is one more bucket, index p.experts, holding every token.
// Nothing is read back by the host: launches cover every expert and the largest possible bucket (n
// rows), and the tiles past a bucket's end exit at once.
#include <metal_stdlib>
using namespace metal;
#include "tiles.h"

// Counting sort of the n·k entries (entry t·k + s: token t's slot s) by expert, one thread per expert:
// count, exclusive scan over the experts, then each expert lists its entries in entry order (so
// within a bucket rows are in (token, slot) order, deterministically). offsets[e] .. offsets[e+1] is
// expert e's bucket in `entries`; positions[entry] is the entry's place there.
[[max_total_threads_per_threadgroup(ROUTER_MAX_EXPERTS)]] kernel void moe_bucket(device const int* ids [[buffer(0)]], device uint* offsets [[buffer(1)]],
                       device uint* entries [[buffer(2)]], device uint* positions [[buffer(3)]],
                       constant MoeTiledParams& p [[buffer(4)]], uint e [[thread_index_in_threadgroup]],
                       uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                       uint simdgroups [[simdgroups_per_threadgroup]]) {
  threadgroup uint totals[ROUTER_MAX_EXPERTS / 32u];
  const uint entry_count = p.n * p.k;
  uint count = 0u;
  for (uint i = 0; i < entry_count; ++i) count += uint(ids[i]) == e ? 1u : 0u;
  const uint before_in_simdgroup = simd_prefix_exclusive_sum(count);
  const uint simdgroup_total = simd_sum(count);
  if (lane == 0u) totals[sg] = simdgroup_total;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint offset = before_in_simdgroup;
  for (uint s = 0; s < simdgroups; ++s) offset += s < sg ? totals[s] : 0u;
  if (e < p.experts) offsets[e] = offset;
  if (e + 1u == p.experts) offsets[p.experts] = offset + count;
  uint at = offset;
  for (uint i = 0; i < entry_count; ++i) {
    if (uint(ids[i]) == e) {
      entries[at] = i;
      positions[i] = at;
      ++at;
    }
  }
}

// The rows of bucket e that tile row r stands for (rows past the bucket repeat its last row; what they
// produce is never stored), as an index into a row-major source, plus whether the tile is empty.
struct Bucket {
  uint begin;  // first position of the bucket in `entries` (0 for the shared expert)
  uint count;  // rows
  bool shared;
};

inline Bucket bucket_of(device const uint* offsets, uint e, uint experts, uint n) {
  const uint ec = min(e, experts - 1u);
  const uint begin = offsets[ec], end = offsets[ec + 1u];
  Bucket b;
  b.shared = e == experts;
  b.begin = b.shared ? 0u : begin;
  b.count = b.shared ? n : end - begin;
  return b;
}

// h[position, i] = silu(gate_e[i] · x[token]) * (up_e[i] · x[token]) for the entries of expert e's
// bucket in bucket order (the shared expert: sh[t, i] for every token t). Threadgroup (row tile of i,
// row tile of the bucket, e); gate and up tiles share the activation tile, SwiGLU in the epilogue.
[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void moe_gate_up_tiled(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                              device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                              device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                              device const uchar* sgw [[buffer(6)]], device const uchar* sgs [[buffer(7)]],
                              device const uchar* sgb [[buffer(8)]], device const uchar* suw [[buffer(9)]],
                              device const uchar* sus [[buffer(10)]], device const uchar* sub [[buffer(11)]],
                              device const float* x [[buffer(12)]], device const uint* offsets [[buffer(13)]],
                              device const uint* entries [[buffer(14)]], device float* h [[buffer(15)]],
                              device float* sh [[buffer(16)]], constant MoeTiledParams& p [[buffer(17)]],
                              uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS)];
  threadgroup uint4 g_words[TILE_WORDS(GEMM_TILE_ROWS)];
  threadgroup uint4 u_words[TILE_WORDS(GEMM_TILE_ROWS)];
  threadgroup float staging[4u * 2u * 8u * STAGING_LD];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  const uint e = group.z, ec = min(e, p.experts - 1u);
  const Bucket b = bucket_of(offsets, e, p.experts, p.n);
  const uint t0 = GEMM_TILE_TOKENS * group.y, i0 = GEMM_TILE_ROWS * group.x;
  const WeightDesc gd = pick_expert_weight(p.gate, p.sgate, b.shared);
  const WeightDesc ud = pick_expert_weight(p.up, p.sup, b.shared);
  if (t0 >= b.count || i0 >= gd.rows) return;  // the whole threadgroup: past the bucket or the rows

  threadgroup half* xt = (threadgroup half*)x_words;
  threadgroup half* gt = (threadgroup half*)g_words;
  threadgroup half* ut = (threadgroup half*)u_words;
  device const uchar* gdata = b.shared ? sgw : gw + expert_bytes(p.gate, ec);
  device const uchar* gscales = b.shared ? sgs : gs + expert_scale_bytes(p.gate, ec);
  device const uchar* gbiases = b.shared ? sgb : gb + expert_scale_bytes(p.gate, ec);
  device const uchar* udata = b.shared ? suw : uw + expert_bytes(p.up, ec);
  device const uchar* uscales = b.shared ? sus : us + expert_scale_bytes(p.up, ec);
  device const uchar* ubiases = b.shared ? sub : ub + expert_scale_bytes(p.up, ec);
  if (tid < GEMM_TILE_TOKENS) {
    const uint r = min(t0 + tid, b.count - 1u);
    row_of[tid] = b.shared ? r : entries[b.begin + r] / p.k;  // the entry's token
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint m = sg / 2u, c = sg % 2u;
  simdgroup_float8x8 acc_g[16], acc_u[16];
  for (uint i = 0; i < 16u; ++i) {
    acc_g[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    acc_u[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
  const bool x_vec = p.x_vec != 0u;
  ActivationRuns xr = fetch_activations(x, p.hidden, x_vec, row_of, 0u, tid, GEMM_THREADS);
  WeightRuns gr = fetch_weights(gd, gdata, gscales, gbiases, i0, gd.rows, 0u, tid, GEMM_THREADS);
  WeightRuns ur = fetch_weights(ud, udata, uscales, ubiases, i0, ud.rows, 0u, tid, GEMM_THREADS);
  for (uint k0 = 0; k0 < p.hidden; k0 += GEMM_K) {
    store_activations(xr, p.hidden, k0, xt, tid, GEMM_THREADS);
    store_weights(gr, gd, k0, gt, tid, GEMM_THREADS);
    store_weights(ur, ud, k0, ut, tid, GEMM_THREADS);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads, in flight during the products.
    xr = fetch_activations(x, p.hidden, x_vec, row_of, k0 + GEMM_K, tid, GEMM_THREADS);
    gr = fetch_weights(gd, gdata, gscales, gbiases, i0, gd.rows, k0 + GEMM_K, tid, GEMM_THREADS);
    ur = fetch_weights(ud, udata, uscales, ubiases, i0, ud.rows, k0 + GEMM_K, tid, GEMM_THREADS);
    tile_products(xt, gt, 32u * m, 32u * c, 4u, acc_g);
    tile_products(xt, ut, 32u * m, 32u * c, 4u, acc_u);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  threadgroup float* gslab = staging + sg * 2u * 8u * STAGING_LD;
  threadgroup float* uslab = gslab + 8u * STAGING_LD;
  const uint i = i0 + 32u * c + lane;
  device float* dst = b.shared ? sh : h + ulong(b.begin) * gd.rows;
  for (uint s = 0; s < 4u; ++s) {
    stage_slab(acc_g, s, gslab);
    stage_slab(acc_u, s, uslab);
    for (uint r = 0; r < 8u; ++r) {
      const uint t = t0 + 32u * m + 8u * s + r;
      const float v = silu(gslab[r * STAGING_LD + lane]) * uslab[r * STAGING_LD + lane];
      if (t < b.count && i < gd.rows) dst[ulong(t) * gd.rows + i] = v;
    }
    slab_done();
  }
}

// y[position, c] = weight(entry) · down_e[c] · h[position] for the entries of expert e's bucket (the
// shared expert: ys[t, c] = shared_scale · sigmoid(gate_logit[t]) · sdown[c] · sh[t]). Threadgroup
// (row tile of c, row tile of the bucket, e).
[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void moe_down_tiled(device const uchar* dw [[buffer(0)]], device const uchar* ds [[buffer(1)]],
                           device const uchar* db [[buffer(2)]], device const uchar* sdw [[buffer(3)]],
                           device const uchar* sds [[buffer(4)]], device const uchar* sdb [[buffer(5)]],
                           device const float* h [[buffer(6)]], device const float* sh [[buffer(7)]],
                           device const uint* offsets [[buffer(8)]], device const uint* entries [[buffer(9)]],
                           device const float* weights [[buffer(10)]], device const float* gate_logit [[buffer(11)]],
                           device float* y [[buffer(12)]], device float* ys [[buffer(13)]],
                           constant MoeTiledParams& p [[buffer(14)]], uint3 group [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS)];
  threadgroup uint4 w_words[TILE_WORDS(GEMM_TILE_ROWS)];
  threadgroup float staging[4u * 8u * STAGING_LD];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  threadgroup float factor[GEMM_TILE_TOKENS];
  const uint e = group.z, ec = min(e, p.experts - 1u);
  const Bucket b = bucket_of(offsets, e, p.experts, p.n);
  const uint t0 = GEMM_TILE_TOKENS * group.y, c0 = GEMM_TILE_ROWS * group.x;
  if (t0 >= b.count || c0 >= p.hidden) return;  // the whole threadgroup: past the bucket or the rows

  const WeightDesc dd = pick_expert_weight(p.down, p.sdown, b.shared);
  device const uchar* data = b.shared ? sdw : dw + expert_bytes(p.down, ec);
  device const uchar* scales = b.shared ? sds : ds + expert_scale_bytes(p.down, ec);
  device const uchar* biases = b.shared ? sdb : db + expert_scale_bytes(p.down, ec);
  device const float* src = b.shared ? sh : h;
  threadgroup half* xt = (threadgroup half*)x_words;
  threadgroup half* wt = (threadgroup half*)w_words;
  if (tid < GEMM_TILE_TOKENS) {
    const uint r = min(t0 + tid, b.count - 1u);
    const uint entry = entries[min(b.begin + r, p.n * p.k - 1u)];
    const float logit = gate_logit[b.shared ? r : 0u];
    row_of[tid] = b.begin + r;  // h rows are in bucket order; sh rows are tokens
    factor[tid] = b.shared ? p.shared_scale * sigmoid(logit) : weights[entry];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint m = sg / 2u, c = sg % 2u;
  simdgroup_float8x8 acc[16];
  for (uint i = 0; i < 16u; ++i) acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const bool h_vec = dd.cols % 8u == 0u;  // h and sh are whole buffers
  ActivationRuns xr = fetch_activations(src, dd.cols, h_vec, row_of, 0u, tid, GEMM_THREADS);
  WeightRuns wr = fetch_weights(dd, data, scales, biases, c0, dd.rows, 0u, tid, GEMM_THREADS);
  for (uint k0 = 0; k0 < dd.cols; k0 += GEMM_K) {
    store_activations(xr, dd.cols, k0, xt, tid, GEMM_THREADS);
    store_weights(wr, dd, k0, wt, tid, GEMM_THREADS);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads, in flight during the products.
    xr = fetch_activations(src, dd.cols, h_vec, row_of, k0 + GEMM_K, tid, GEMM_THREADS);
    wr = fetch_weights(dd, data, scales, biases, c0, dd.rows, k0 + GEMM_K, tid, GEMM_THREADS);
    tile_products(xt, wt, 32u * m, 32u * c, 4u, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  threadgroup float* slab = staging + sg * 8u * STAGING_LD;
  const uint col = c0 + 32u * c + lane;
  device float* dst = b.shared ? ys : y + ulong(b.begin) * p.hidden;
  for (uint s = 0; s < 4u; ++s) {
    stage_slab(acc, s, slab);
    for (uint r = 0; r < 8u; ++r) {
      const uint t = t0 + 32u * m + 8u * s + r;
      const float v = slab[r * STAGING_LD + lane] * factor[32u * m + 8u * s + r];
      if (t < b.count && col < p.hidden) dst[ulong(t) * p.hidden + col] = v;
    }
    slab_done();
  }
}

// out[t, c] = Σ_s y[positions[t·k + s], c] in slot order, then + ys[t, c] with the shared expert (the
// CPU backend's order).
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void moe_combine(device const float* y [[buffer(0)]], device const float* ys [[buffer(1)]],
                        device const uint* positions [[buffer(2)]], device float* out [[buffer(3)]],
                        constant MoeTiledParams& p [[buffer(4)]], uint i [[thread_position_in_grid]]) {
  const uint count = p.n * p.hidden;
  const uint ic = min(i, count - 1u), t = ic / p.hidden, c = ic % p.hidden;
  float sum = 0.0f;
  for (uint s = 0; s < p.k; ++s) sum += y[ulong(positions[t * p.k + s]) * p.hidden + c];
  const float shared = ys[ic];  // bound (and unread by the sum) without a shared expert too
  if (i < count) out[i] = p.shared != 0u ? sum + shared : sum;
}
