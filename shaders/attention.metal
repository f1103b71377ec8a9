// Gated full attention: q/k RMSNorm + partial NeoX RoPE, and causal GQA attention over the KV cache,
// split over chunks of key positions (flash-decoding) with a log-sum-exp combine (docs/model.md §2.4).
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// One simdgroup per (head, token): grid (heads + kv_heads, n). Query heads: split q_proj's per-head
// [query | gate] row into q and gate, then norm + rope into q. KV heads: norm + rope k in place.
[[max_total_threads_per_threadgroup(32)]] kernel void attention_prep(device const float* qg [[buffer(0)]], device float* k [[buffer(1)]],
                           device const float* q_norm [[buffer(2)]], device const float* k_norm [[buffer(3)]],
                           device float* q [[buffer(4)]], device float* gate [[buffer(5)]],
                           constant AttentionPrepParams& p [[buffer(6)]],
                           uint2 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  const uint head = group.x, t = group.y;
  const uint D = p.head_dim, half_rot = p.rotary_dim / 2u;
  device const float* src;
  device float* dst;
  device const float* w;
  if (head < p.heads) {
    const uint q_stride = p.gated != 0u ? 2u * D : D;
    src = qg + (ulong(t) * p.heads + head) * q_stride;
    dst = q + (ulong(t) * p.heads + head) * D;
    w = q_norm;
    if (p.gated != 0u)
      for (uint i = lane; i < D; i += 32u) gate[(ulong(t) * p.heads + head) * D + i] = src[D + i];
  } else {
    dst = k + (ulong(t) * p.kv_heads + (head - p.heads)) * D;
    src = dst;
    w = k_norm;
  }
  float ss = 0.0f;
  for (uint i = lane; i < D; i += 32u) ss += src[i] * src[i];
  const float inv = 1.0f / sqrt(simd_sum(ss) / float(D) + p.eps);
  const float pos = float(p.pos0 + t);
  for (uint i = lane; i < half_rot; i += 32u) {
    const float inv_freq = 1.0f / precise::pow(p.rope_theta, float(2u * i) / float(p.rotary_dim));
    const float angle = pos * inv_freq;
    const float c = precise::cos(angle), s = precise::sin(angle);
    const float x1 = src[i] * inv * w[i], x2 = src[i + half_rot] * inv * w[i + half_rot];
    dst[i] = x1 * c - x2 * s;
    dst[i + half_rot] = x2 * c + x1 * s;
  }
  for (uint i = p.rotary_dim + lane; i < D; i += 32u) dst[i] = src[i] * inv * w[i];
}

// Partial attention of the `group` query heads sharing KV head `kvh`, for token t0 + t, over key
// positions [c·ATTN_CHUNK, (c+1)·ATTN_CHUNK) ∩ [0, pos0 + t0 + t]: writes the chunk's max score m,
// Σ e^(s−m) and Σ e^(s−m)·v (GQA packing: each K/V row is read once for all heads of the group).
// grid (chunks, kv_heads, n), REDUCE_THREADS threads. part_ml [n, heads, chunks, 2], part_o [n, heads, chunks, D].
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void attention_partial(device const float* q [[buffer(0)]], device const float* k_cache [[buffer(1)]],
                              device const float* v_cache [[buffer(2)]], device float* part_ml [[buffer(3)]],
                              device float* part_o [[buffer(4)]], constant AttentionParams& p [[buffer(5)]],
                              uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                              uint simdgroups [[simdgroups_per_threadgroup]],
                              uint threads [[threads_per_threadgroup]]) {
  threadgroup float qs[ATTN_MAX_QUERY_FLOATS];
  threadgroup float score[ATTN_MAX_GROUP * ATTN_CHUNK];

  const uint c = group.x, kvh = group.y, t = group.z;
  const uint D = p.head_dim, G = p.heads / p.kv_heads, kv_width = p.kv_heads * D;
  const uint tc = p.t0 + t, len = p.pos0 + tc + 1u;
  const uint c0 = c * ATTN_CHUNK;
  const uint count = c0 < len ? min(ATTN_CHUNK, len - c0) : 0u;
  const ulong part = (ulong(t) * p.heads + kvh * G) * p.chunks + c;  // (t, first head of the group, c)

  if (count == 0u) {  // the whole chunk is in this token's future
    for (uint i = tid; i < G * D; i += threads) part_o[(part + (i / D) * p.chunks) * D + i % D] = 0.0f;
    if (tid < G) {
      part_ml[(part + tid * p.chunks) * 2u] = -INFINITY;
      part_ml[(part + tid * p.chunks) * 2u + 1u] = 0.0f;
    }
    return;
  }
  for (uint i = tid; i < G * D; i += threads) qs[i] = q[(ulong(tc) * p.heads + kvh * G) * D + i] * p.scale;
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // Scores: one simdgroup per key position, lanes over the head dimension. The key row is loaded into
  // registers at once (clamped loads, masked products: no branch between a load and its use).
  for (uint j = sg; j < count; j += simdgroups) {
    device const float* kr = k_cache + ulong(c0 + j) * kv_width + kvh * D;
    float kv[ATTN_MAX_HEAD_DIM / 32u];
    for (uint i = 0; i < ATTN_MAX_HEAD_DIM / 32u; ++i) kv[i] = lane + 32u * i < D ? kr[min(lane + 32u * i, D - 1u)] : 0.0f;
    for (uint g = 0; g < G; ++g) {
      float s = 0.0f;
      for (uint i = 0; i < ATTN_MAX_HEAD_DIM / 32u; ++i) s += qs[g * D + min(lane + 32u * i, D - 1u)] * kv[i];
      s = simd_sum(s);
      if (lane == 0u) score[g * ATTN_CHUNK + j] = s;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // Per head: max, exponentials (kept in `score`) and their sum.
  for (uint g = sg; g < G; g += simdgroups) {
    float m = -INFINITY;
    for (uint j = lane; j < count; j += 32u) m = max(m, score[g * ATTN_CHUNK + j]);
    m = simd_max(m);
    float l = 0.0f;
    for (uint j = lane; j < count; j += 32u) {
      const float e = exp(score[g * ATTN_CHUNK + j] - m);
      score[g * ATTN_CHUNK + j] = e;
      l += e;
    }
    l = simd_sum(l);
    if (lane == 0u) {
      part_ml[(part + g * p.chunks) * 2u] = m;
      part_ml[(part + g * p.chunks) * 2u + 1u] = l;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // Σ e·v per head and dimension: a thread's V column over the chunk is loaded into registers at
  // once, then serves every head of the group.
  for (uint d = tid; d < D; d += threads) {
    float vv[ATTN_CHUNK];
    for (uint j = 0; j < ATTN_CHUNK; ++j) vv[j] = v_cache[ulong(c0 + min(j, count - 1u)) * kv_width + kvh * D + d];
    for (uint g = 0; g < G; ++g) {
      float acc = 0.0f;
      for (uint j = 0; j < ATTN_CHUNK; ++j) acc += j < count ? score[g * ATTN_CHUNK + j] * vv[j] : 0.0f;
      part_o[(part + g * p.chunks) * D + d] = acc;
    }
  }
}

// out[t0 + t, h] = Σ_c e^(m_c − M)·o_c / Σ_c e^(m_c − M)·l_c, times sigmoid(gate) when p.gated (the
// output gate), and lse[t, h] = M + log Σ_c e^(m_c − M)·l_c (for attention_probs); one threadgroup per
// (head, token): grid (heads, n).
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void attention_combine(device const float* part_ml [[buffer(0)]], device const float* part_o [[buffer(1)]],
                              device float* out [[buffer(2)]], device float* lse [[buffer(3)]],
                              device const float* gate [[buffer(4)]],
                              constant AttentionParams& p [[buffer(5)]], uint2 group [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]], uint threads [[threads_per_threadgroup]]) {
  const uint h = group.x, t = group.y, D = p.head_dim;
  const ulong base = (ulong(t) * p.heads + h) * p.chunks;
  float M = -INFINITY;
  for (uint c = 0; c < p.chunks; ++c) M = max(M, part_ml[(base + c) * 2u]);
  float L = 0.0f;
  for (uint c = 0; c < p.chunks; ++c) {
    const float m = part_ml[(base + c) * 2u];
    if (m != -INFINITY) L += exp(m - M) * part_ml[(base + c) * 2u + 1u];
  }
  for (uint d = tid; d < D; d += threads) {
    float acc = 0.0f;
    for (uint c = 0; c < p.chunks; ++c) {
      const float m = part_ml[(base + c) * 2u];
      if (m != -INFINITY) acc += exp(m - M) * part_o[(base + c) * D + d];
    }
    const ulong at = (ulong(p.t0 + t) * p.heads + h) * D + d;
    out[at] = p.gated != 0u ? acc / L * sigmoid(gate[at]) : acc / L;
  }
  if (tid == 0u) lse[ulong(t) * p.heads + h] = M + log(L);
}

// The softmax weights themselves, on request: probs[h, t0 + t, j] = e^(s_j − lse) for j <= pos0 + t0 + t,
// else 0; grid (chunks, heads, n), one simdgroup per key position. probs [heads, n_call, pos0 + n_call].
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void attention_probs(device const float* q [[buffer(0)]], device const float* k_cache [[buffer(1)]],
                            device const float* lse [[buffer(2)]], device float* probs [[buffer(3)]],
                            constant AttentionParams& p [[buffer(4)]], uint3 group [[threadgroup_position_in_grid]],
                            uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                            uint simdgroups [[simdgroups_per_threadgroup]]) {
  const uint c = group.x, h = group.y, t = group.z, D = p.head_dim;
  const uint tc = p.t0 + t, total = p.pos0 + p.n_call, len = p.pos0 + tc + 1u;
  const uint kvh = h / (p.heads / p.kv_heads), kv_width = p.kv_heads * D;
  device const float* qv = q + (ulong(tc) * p.heads + h) * D;
  device float* row = probs + (ulong(h) * p.n_call + tc) * total;
  const float l = lse[ulong(t) * p.heads + h];
  for (uint j = c * ATTN_CHUNK + sg; j < min(total, (c + 1u) * ATTN_CHUNK); j += simdgroups) {
    if (j >= len) {
      if (lane == 0u) row[j] = 0.0f;
      continue;
    }
    device const float* kr = k_cache + ulong(j) * kv_width + kvh * D;
    float s = 0.0f;
    for (uint d = lane; d < D; d += 32u) s += qv[d] * kr[d];
    s = simd_sum(s) * p.scale;
    if (lane == 0u) row[j] = exp(s - l);
  }
}
