// Causal prefill attention on the matrix units (flash attention): one pass over the keys with an online
// softmax, QKᵀ and PV as 8x8 simdgroup matrix products (fp16 operands, fp32 accumulation), the output
// gate in the epilogue. Math: model-reference.md §2.4; the split-K kernels of attention.metal serve
// decode, the fp32 precision and the softmax-weights capture.
//
// Query rows are (token, query head) pairs of one KV head, token-major: the G heads that share a KV
// head sit in consecutive rows, so every K/V tile loaded into threadgroup memory serves all of them
// (GQA). A threadgroup takes ATTN_PREFILL_ROWS rows, 8 per simdgroup, and walks the keys 0 .. the last
// row's position in tiles of BK; keys past a row's position are masked, tiles past every row's are
// never loaded. The KV cache is read where the projections wrote it ([position, kv_heads, head_dim],
// fp32) and rounded to half on its way into the tiles.
//
// The running maximum is lazy: a row's probabilities are exp2(s − m) against the maximum m last
// adopted, and m moves only when a tile's maximum exceeds it by ATTN_PREFILL_RESCALE (log2 units). The
// weights written for PV then stay ≤ 2^ATTN_PREFILL_RESCALE (well inside half's range) and the fp32
// accumulator is rescaled only on the rare tiles that move m: the portable subset has no per-lane
// access to a matrix, so a rescale goes through threadgroup memory.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// The K and V tiles (BK keys each, rows of D halves padded by 8: 16-byte aligned rows, staggered
// banks), the per-simdgroup score tiles (8 x BK floats) and weight tiles (8 x BK halves).
#define ATTN_PREFILL_KV_HALVES(D, BK) (2u * (BK) * ((D) + 8u))
#define ATTN_PREFILL_SCORE_FLOATS(BK) (ATTN_PREFILL_SIMDGROUPS * 8u * ((BK) + 4u))
#define ATTN_PREFILL_WEIGHT_HALVES(BK) (ATTN_PREFILL_SIMDGROUPS * 8u * ((BK) + 8u))

// The kernel body for head dimension D and BK keys per tile (constants at each call, so that the loops
// over D/8 and BK/8 unroll and the matrix arrays stay in registers). kv holds the K tile then the V tile;
// before the first tile it stages the query rows (2·BK >= ATTN_PREFILL_ROWS).
inline void attention_prefill_rows(device const float* q, device const float* k_cache, device const float* v_cache,
                                   device const float* gate, device float* out, constant AttentionPrefillParams& p,
                                   threadgroup half* kv, threadgroup float* scores, threadgroup half* weights,
                                   const uint D, const uint BK, uint tile, uint kvh, uint tid, uint sg, uint lane) {
  const uint LD = D + 8u, SLD = BK + 4u, PLD = BK + 8u;
  const uint G = p.group, rows = p.n * G, kv_width = p.kv_heads * D;
  // Latest tiles (the longest, causally) first: they then finish with the rest.
  const uint r0 = (p.tiles - 1u - tile) * ATTN_PREFILL_ROWS;
  const uint last_token = (min(r0 + ATTN_PREFILL_ROWS, rows) - 1u) / G;
  const uint keys = p.pos0 + last_token + 1u;  // keys the tile's last row attends to

  // This lane's softmax row (4 lanes per row, BK/4 columns each) and the row's causal limit.
  const uint row = lane / 4u, quarter = lane % 4u, per_lane = BK / 4u;
  const uint my_row = min(r0 + sg * 8u + row, rows - 1u);
  const uint my_len = p.pos0 + my_row / G + 1u;
  threadgroup float* sc = scores + sg * 8u * SLD;
  threadgroup half* pw = weights + sg * 8u * PLD;

  // Query rows, scaled by 1/sqrt(D)·log2(e) and rounded to half, staged through kv into registers.
  for (uint i = tid; i < ATTN_PREFILL_ROWS * D; i += ATTN_PREFILL_THREADS) {
    const uint r = min(r0 + i / D, rows - 1u), t = r / G, h = kvh * G + r % G;
    kv[(i / D) * LD + i % D] = half(q[(ulong(t) * p.heads + h) * D + i % D] * p.scale);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 qm[ATTN_PREFILL_MAX_HEAD_DIM / 8u];
  simdgroup_float8x8 om[ATTN_PREFILL_MAX_HEAD_DIM / 8u];
  for (uint j = 0; j < D / 8u; ++j) {
    simdgroup_load(qm[j], kv, LD, ulong2(j * 8u, sg * 8u));
    om[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  float m = -INFINITY, l = 0.0f;  // the row's adopted maximum (log2 units); this lane's share of Σp
  const uint per_thread = BK * D / ATTN_PREFILL_THREADS;
  for (uint k0 = 0; k0 < keys; k0 += BK) {
    // K and V rows k0 .. k0+BK-1 (clamped to the last key: masked below), rounded to half. Each
    // thread loads ATTN_PREFILL_LOADS of each before storing any.
    for (uint i0 = 0; i0 < per_thread; i0 += ATTN_PREFILL_LOADS) {
      float kr[ATTN_PREFILL_LOADS], vr[ATTN_PREFILL_LOADS];
      for (uint u = 0; u < ATTN_PREFILL_LOADS; ++u) {
        const uint i = tid + (i0 + u) * ATTN_PREFILL_THREADS;
        const ulong at = ulong(min(k0 + i / D, keys - 1u)) * kv_width + kvh * D + i % D;
        kr[u] = k_cache[at];
        vr[u] = v_cache[at];
      }
      for (uint u = 0; u < ATTN_PREFILL_LOADS; ++u) {
        const uint i = tid + (i0 + u) * ATTN_PREFILL_THREADS;
        kv[(i / D) * LD + i % D] = half(kr[u]);
        kv[(BK + i / D) * LD + i % D] = half(vr[u]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Scores of this simdgroup's 8 rows against the BK keys: S = Q·Kᵀ (K read transposed).
    for (uint c = 0; c < BK / 8u; ++c) {
      simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      for (uint j = 0; j < D / 8u; ++j) {
        simdgroup_half8x8 kt;
        simdgroup_load(kt, kv, LD, ulong2(j * 8u, c * 8u), true);
        simdgroup_multiply_accumulate(s, qm[j], kt, s);
      }
      simdgroup_store(s, sc, SLD, ulong2(c * 8u, 0u));
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);

    // Online softmax, 4 lanes per row: causal mask, the tile's row maximum, the lazy maximum, weights.
    float sv[ATTN_PREFILL_MAX_KEYS / 4u];
    float mx = -INFINITY;
    for (uint c = 0; c < per_lane; ++c) {
      const uint col = quarter * per_lane + c;
      sv[c] = k0 + col < my_len ? sc[row * SLD + col] : -INFINITY;
      mx = max(mx, sv[c]);
    }
    mx = max(mx, simd_shuffle_xor(mx, ushort(1)));
    mx = max(mx, simd_shuffle_xor(mx, ushort(2)));
    const bool grow = mx > m + ATTN_PREFILL_RESCALE;
    const float alpha = grow ? exp2(m - mx) : 1.0f;  // 0 when m was −inf
    const bool rescale = simd_any(grow && m != -INFINITY);
    m = grow ? mx : m;
    l *= alpha;
    const float base = m == -INFINITY ? 0.0f : m;  // a row with no key yet: every weight 0
    for (uint c = 0; c < per_lane; ++c) {
      const half w = half(exp2(sv[c] - base));
      pw[row * PLD + quarter * per_lane + c] = w;
      l += float(w);
    }
    if (rescale) {  // uniform in the simdgroup: O's rows times alpha, BK columns at a time
      for (uint j0 = 0; j0 < D / 8u; j0 += BK / 8u) {
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = 0; c < BK / 8u; ++c) simdgroup_store(om[j0 + c], sc, SLD, ulong2(c * 8u, 0u));
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = 0; c < per_lane; ++c) sc[row * SLD + quarter * per_lane + c] *= alpha;
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = 0; c < BK / 8u; ++c) simdgroup_load(om[j0 + c], sc, SLD, ulong2(c * 8u, 0u));
      }
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);

    // O += P·V.
    simdgroup_half8x8 pm[ATTN_PREFILL_MAX_KEYS / 8u];
    for (uint c = 0; c < BK / 8u; ++c) simdgroup_load(pm[c], pw, PLD, ulong2(c * 8u, 0u));
    for (uint j = 0; j < D / 8u; ++j)
      for (uint c = 0; c < BK / 8u; ++c) {
        simdgroup_half8x8 vm;
        simdgroup_load(vm, kv + BK * LD, LD, ulong2(j * 8u, c * 8u));
        simdgroup_multiply_accumulate(om[j], pm[c], vm, om[j]);
      }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // before the next tile overwrites kv
  }

  // Epilogue: O / Σp, times sigmoid(gate) when gated, through the score tile BK columns at a time.
  l += simd_shuffle_xor(l, ushort(1));
  l += simd_shuffle_xor(l, ushort(2));
  const float inv = 1.0f / l;
  const bool valid = r0 + sg * 8u + row < rows;
  const ulong at_row = (ulong(my_row / G) * p.heads + kvh * G + my_row % G) * D;
  for (uint j0 = 0; j0 < D / 8u; j0 += BK / 8u) {
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint c = 0; c < BK / 8u; ++c) simdgroup_store(om[j0 + c], sc, SLD, ulong2(c * 8u, 0u));
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint c = 0; c < per_lane; ++c) {
      const uint col = quarter * per_lane + c;
      const ulong at = at_row + j0 * 8u + col;
      const float o = sc[row * SLD + col] * inv;
      const float y = p.gated != 0u ? o * sigmoid(gate[at]) : o;
      if (valid) out[at] = y;
    }
  }
}

[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_32(
    device const float* q [[buffer(0)]], device const float* k_cache [[buffer(1)]], device const float* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup half kv[ATTN_PREFILL_KV_HALVES(32u, 32u)];
  threadgroup float scores[ATTN_PREFILL_SCORE_FLOATS(32u)];
  threadgroup half weights[ATTN_PREFILL_WEIGHT_HALVES(32u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, kv, scores, weights, 32u, 32u, group.x, group.y, tid, sg, lane);
}

[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_64(
    device const float* q [[buffer(0)]], device const float* k_cache [[buffer(1)]], device const float* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup half kv[ATTN_PREFILL_KV_HALVES(64u, 32u)];
  threadgroup float scores[ATTN_PREFILL_SCORE_FLOATS(32u)];
  threadgroup half weights[ATTN_PREFILL_WEIGHT_HALVES(32u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, kv, scores, weights, 64u, 32u, group.x, group.y, tid, sg, lane);
}

[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_128(
    device const float* q [[buffer(0)]], device const float* k_cache [[buffer(1)]], device const float* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup half kv[ATTN_PREFILL_KV_HALVES(128u, 32u)];
  threadgroup float scores[ATTN_PREFILL_SCORE_FLOATS(32u)];
  threadgroup half weights[ATTN_PREFILL_WEIGHT_HALVES(32u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, kv, scores, weights, 128u, 32u, group.x, group.y, tid, sg, lane);
}

// Head dim 256 (the model's): tiles of 16 keys keep K and V within 17 KB of threadgroup memory.
[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_256(
    device const float* q [[buffer(0)]], device const float* k_cache [[buffer(1)]], device const float* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup half kv[ATTN_PREFILL_KV_HALVES(256u, 16u)];
  threadgroup float scores[ATTN_PREFILL_SCORE_FLOATS(16u)];
  threadgroup half weights[ATTN_PREFILL_WEIGHT_HALVES(16u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, kv, scores, weights, 256u, 16u, group.x, group.y, tid, sg, lane);
}
