// Gated full attention: q/k RMSNorm + partial NeoX RoPE, and causal GQA attention over the KV cache,
// split over spans of key positions sized by the context (flash-decoding) with a log-sum-exp combine
// (docs/model.md §2.4).
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// One value of a KV cache row: into the fp32 rows or, rounded, into the half rows.
inline void store_cached(device float* rows, device half* rows_half, bool to_half, ulong at, float v) {
  if (to_half) rows_half[at] = half(v);
  else rows[at] = v;
}

// One simdgroup per (head, token): grid (heads + kv_heads, n). Query heads: split q_proj's per-head
// [query | gate] row into q and gate, then norm + rope into q. KV heads: norm + rope k in place, and
// with p.store k and v also into the KV cache rows (k_rows, v_rows as fp32, or k_rows_half, v_rows_half
// rounded to half). Every value a lane needs is loaded first, into registers (lane l holds columns l,
// l + 32, ... up to ATTN_SPLIT_MAX_HEAD_DIM), and stored after: a loop that stored before its next load
// waited a memory latency per iteration, since the stores may alias the loads (k in place).
[[max_total_threads_per_threadgroup(32)]] kernel void attention_prep(device const float* qg [[buffer(0)]], device float* k [[buffer(1)]],
                           device const float* q_norm [[buffer(2)]], device const float* k_norm [[buffer(3)]],
                           device float* q [[buffer(4)]], device float* gate [[buffer(5)]],
                           constant AttentionPrepParams& p [[buffer(6)]], device const float* v [[buffer(7)]],
                           device float* k_rows [[buffer(8)]], device float* v_rows [[buffer(9)]],
                           device half* k_rows_half [[buffer(10)]], device half* v_rows_half [[buffer(11)]],
                           uint2 group [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  constexpr uint PER = ATTN_SPLIT_MAX_HEAD_DIM / 32u, ROT = PER / 2u;  // rotated pairs: i < rotary_dim / 2 <= D / 2
  const uint head = group.x, t = group.y;
  const uint D = p.head_dim, half_rot = p.rotary_dim / 2u;
  const bool query = head < p.heads, gated = query && p.gated != 0u;
  device const float* src;
  device float* dst;
  device const float* w;
  if (query) {
    const uint q_stride = p.gated != 0u ? 2u * D : D;
    src = qg + (ulong(t) * p.heads + head) * q_stride;
    dst = q + (ulong(t) * p.heads + head) * D;
    w = q_norm;
  } else {
    dst = k + (ulong(t) * p.kv_heads + (head - p.heads)) * D;
    src = dst;
    w = k_norm;
  }
  // Before the wait: the norm's weights and the rotation's angles (they depend on the position only).
  float x[PER], wx[PER], g[PER], x2[ROT], w2[ROT], y2[ROT], cs[ROT], sn[ROT];  // clamped, unconditional loads
  for (uint j = 0; j < PER; ++j) wx[j] = w[min(lane + 32u * j, D - 1u)];
  const float pos = float(p.pos0 + t);
  for (uint j = 0; j < ROT; ++j) {
    const uint i = lane + 32u * j;
    w2[j] = w[min(i + half_rot, D - 1u)];
    cs[j] = 0.0f;
    sn[j] = 0.0f;
    if (i < half_rot) {
      const float inv_freq = 1.0f / precise::pow(p.rope_theta, float(2u * i) / float(p.rotary_dim));
      cs[j] = precise::cos(pos * inv_freq);
      sn[j] = precise::sin(pos * inv_freq);
    }
  }
  await_inputs();
  for (uint j = 0; j < PER; ++j) {
    const uint i = min(lane + 32u * j, D - 1u);
    x[j] = src[i];
    g[j] = gated ? src[D + i] : 0.0f;
  }
  for (uint j = 0; j < ROT; ++j) x2[j] = src[min(lane + 32u * j + half_rot, D - 1u)];  // the rotated pairs' partners
  // The cache rows of a KV head: its k as stored below, and its v.
  const bool store = !query && p.store != KV_STORE_NONE;
  const ulong row = (ulong(t) * p.kv_heads + (head - min(head, p.heads))) * D;
  float vx[PER];
  for (uint j = 0; j < PER; ++j) vx[j] = store ? v[row + min(lane + 32u * j, D - 1u)] : 0.0f;
  float ss = 0.0f;
  for (uint j = 0; j < PER; ++j) ss += lane + 32u * j < D ? x[j] * x[j] : 0.0f;
  const float inv = 1.0f / sqrt(simd_sum(ss) / float(D) + p.eps);
  float y[PER];  // this lane's columns of the result
  for (uint j = 0; j < PER; ++j) y[j] = x[j] * inv * wx[j];
  for (uint j = 0; j < ROT; ++j) {
    const float a = y[j], b = x2[j] * inv * w2[j];
    if (lane + 32u * j < half_rot) y[j] = a * cs[j] - b * sn[j];
    y2[j] = b * cs[j] + a * sn[j];  // column lane + 32j + half_rot
  }
  const bool to_half = p.store == KV_STORE_F16;
  for (uint j = 0; j < PER; ++j) {
    const uint i = lane + 32u * j;
    if (gated && i < D) gate[(ulong(t) * p.heads + head) * D + i] = g[j];
    if ((i >= half_rot && i < p.rotary_dim) || i >= D) continue;
    dst[i] = y[j];
    if (store) store_cached(k_rows, k_rows_half, to_half, row + i, y[j]);
  }
  for (uint j = 0; j < ROT; ++j) {
    const uint i = lane + 32u * j + half_rot;  // the rotated partner's column
    if (lane + 32u * j >= half_rot) continue;
    dst[i] = y2[j];
    if (store) store_cached(k_rows, k_rows_half, to_half, row + i, y2[j]);
  }
  if (store)
    for (uint j = 0; j < PER; ++j)
      if (lane + 32u * j < D) store_cached(v_rows, v_rows_half, to_half, row + lane + 32u * j, vx[j]);
}

// Split-K attention (flash-decoding) of the `group` query heads sharing KV head `kvh`, for token t0 + t:
// threadgroup `s` walks the key positions [s·span, (s+1)·span) ∩ [0, pos0 + t0 + t] in blocks of
// ATTN_SPLIT_BLOCK with an online softmax (running maximum and sum, the accumulator rescaled as the
// maximum moves). grid (splits, kv_heads, n), REDUCE_THREADS threads. Two builds by the largest group
// they take (their accumulators are 4 floats per head of it): attention_partial up to
// ATTN_PARTIAL_GROUP heads per KV head, attention_partial_wide up to ATTN_MAX_GROUP.
//  - Scores: simdgroup sg of SG takes keys sg and sg + SG of a block, its lanes one float4 of the K row each;
//    each K row is read once and dotted with all G query heads (from threadgroup memory), simd_sum per
//    head and key.
//  - Softmax: thread (g, b) owns head g's score of key b: block maximum, new running maximum, weight.
//  - PV: thread (kl, c) owns the float4 c of the V rows kl, kl + KL, ... of the block for all G heads,
//    so each V row is read once, coalesced, for the whole group.
//  A block's V rows are loaded once its scores are taken, the next block's K rows right after, so that
//  both are in flight during the softmax and the V products.
// One split (splits == 1): the output (times sigmoid(gate) when p.gated) and lse[t, h] are written here;
// otherwise the split's maximum m, Σ e^(s−m) and Σ e^(s−m)·v go to part_ml [n, heads, splits, 2] and
// part_o [n, heads, splits, D] for attention_combine (a split wholly in the token's future: m = −∞).

inline void attention_partial_span(device const float* q, device const float* k_cache, device const float* v_cache,
                                   device float* part_ml, device float* part_o, device float* out, device float* lse,
                                   device const float* gate, constant AttentionParams& p, uint3 group, uint tid, uint sg,
                                   uint lane, threadgroup float4* qs4, threadgroup float* score, threadgroup float* weight,
                                   threadgroup float* rescale, thread float* acc, thread float* d, uint max_group) {
  threadgroup float* qs = (threadgroup float*)qs4;  // the scaled queries; at the end, the summed accumulators
  const uint s = group.x, kvh = group.y, t = group.z, B = ATTN_SPLIT_BLOCK, SG = REDUCE_THREADS / 32u;
  const uint D = p.head_dim, Q4 = D / 4u, G = p.heads / p.kv_heads, kv_width = p.kv_heads * D;
  const uint tc = p.t0 + t, len = p.pos0 + tc + 1u;
  const uint k0 = s * p.span, k1 = min(k0 + p.span, len);
  const ulong part = (ulong(t) * p.heads + kvh * G) * p.splits + s;  // (t, first head of the group, s)

  if (k0 >= len) {  // the whole span is in this token's future (never so for the first split)
    for (uint i = tid; i < G * D; i += REDUCE_THREADS) part_o[(part + (i / D) * p.splits) * D + i % D] = 0.0f;
    if (tid < G) {
      part_ml[(part + tid * p.splits) * 2u] = -INFINITY;
      part_ml[(part + tid * p.splits) * 2u + 1u] = 0.0f;
    }
    return;
  }
  for (uint i = tid; i < G * D; i += REDUCE_THREADS) qs[i] = q[(ulong(tc) * p.heads + kvh * G) * D + i] * p.scale;

  // The softmax thread (pg, pb) and the PV thread (kl, c); KL key lanes of Q4 threads each.
  const uint pg = tid / B, pb = tid % B;
  const uint KL = min(REDUCE_THREADS / Q4, B), c = tid % Q4, kl = tid / Q4;
  const uint sums = ATTN_SPLIT_KEYS_PER_SIMDGROUP * max_group;
  float m_run = -INFINITY, l_run = 0.0f;
  for (uint i = 0; i < 4u * max_group; ++i) acc[i] = 0.0f;
  device const float4* k4 = (device const float4*)(k_cache + kvh * D);
  device const float4* v4 = (device const float4*)(v_cache + kvh * D);
  const uint row4 = kv_width / 4u;
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // This simdgroup's K rows of a block (rows clamped to the span's last).
  float4 kr[ATTN_SPLIT_KEYS_PER_SIMDGROUP][ATTN_SPLIT_MAX_HEAD_DIM / 128u];
  for (uint r = 0; r < ATTN_SPLIT_KEYS_PER_SIMDGROUP; ++r)
    for (uint i = 0; i < ATTN_SPLIT_MAX_HEAD_DIM / 128u; ++i) {
      const float4 k = k4[ulong(min(k0 + sg + SG * r, k1 - 1u)) * row4 + min(lane + 32u * i, Q4 - 1u)];
      kr[r][i] = k;
    }
  for (uint j0 = k0; j0 < k1; j0 += B) {
    // d[r · max_group + g]: this lane's share of head g's score of key sg + SG·r.
    for (uint g = 0; g < max_group; ++g) {
      float4 qv[ATTN_SPLIT_MAX_HEAD_DIM / 128u];
      for (uint i = 0; i < ATTN_SPLIT_MAX_HEAD_DIM / 128u; ++i) {
        const float4 qq = qs4[min(g, G - 1u) * Q4 + min(lane + 32u * i, Q4 - 1u)];
        qv[i] = qq;
      }
      for (uint r = 0; r < ATTN_SPLIT_KEYS_PER_SIMDGROUP; ++r) {
        float dot = 0.0f;
        for (uint i = 0; i < ATTN_SPLIT_MAX_HEAD_DIM / 128u; ++i) {
          const float d4 = qv[i].x * kr[r][i].x + qv[i].y * kr[r][i].y + qv[i].z * kr[r][i].z + qv[i].w * kr[r][i].w;
          dot += lane + 32u * i < Q4 ? d4 : 0.0f;
        }
        d[r * max_group + g] = g < G ? dot : 0.0f;
      }
    }
    for (uint v = 0; v < sums; ++v) {
      const float sum = simd_sum(d[v]);
      const uint r = v / max_group, g = v % max_group, b = sg + SG * r;
      if (lane == 0u && g < G) score[g * B + b] = j0 + b < k1 ? sum : -INFINITY;
    }
    float4 vv[ATTN_SPLIT_KEYS_PER_THREAD];  // this thread's V float4s of the block
    for (uint r = 0; r < ATTN_SPLIT_KEYS_PER_THREAD; ++r) {
      const float4 v = v4[ulong(min(j0 + min(kl + KL * r, B - 1u), k1 - 1u)) * row4 + c];
      vv[r] = v;
    }
    // The next block's K rows (after the last block: its own again, unused), in flight from here on.
    const uint jn = j0 + B < k1 ? j0 + B : j0;
    for (uint r = 0; r < ATTN_SPLIT_KEYS_PER_SIMDGROUP; ++r)
      for (uint i = 0; i < ATTN_SPLIT_MAX_HEAD_DIM / 128u; ++i) {
        const float4 k = k4[ulong(min(jn + sg + SG * r, k1 - 1u)) * row4 + min(lane + 32u * i, Q4 - 1u)];
        kr[r][i] = k;
      }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    if (pg < G) {  // key j0 is in the span, so the block's maximum is finite
      float bm = -INFINITY;
      for (uint b = 0; b < B; ++b) bm = max(bm, score[pg * B + b]);
      const float m_new = max(m_run, bm), a = exp(m_run - m_new), e = exp(score[pg * B + pb] - m_new);
      weight[pg * B + pb] = e;
      if (pb == 0u) rescale[pg] = a;
      l_run = l_run * a + e;
      m_run = m_new;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (uint g = 0; g < max_group; ++g) {
      if (g < G) {
        const float a = rescale[g];
        float o0 = acc[4u * g] * a, o1 = acc[4u * g + 1u] * a, o2 = acc[4u * g + 2u] * a, o3 = acc[4u * g + 3u] * a;
        for (uint r = 0; r < ATTN_SPLIT_KEYS_PER_THREAD; ++r) {
          const float w = kl + KL * r < B ? weight[g * B + min(kl + KL * r, B - 1u)] : 0.0f;
          o0 += w * vv[r].x;
          o1 += w * vv[r].y;
          o2 += w * vv[r].z;
          o3 += w * vv[r].w;
        }
        acc[4u * g] = o0;
        acc[4u * g + 1u] = o1;
        acc[4u * g + 2u] = o2;
        acc[4u * g + 3u] = o3;
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // Sum the key lanes' accumulators into qs (one lane at a time), the (g, b) sums into score.
  if (pg < G) {
    score[pg * B + pb] = l_run;
    if (pb == 0u) rescale[pg] = m_run;
  }
  for (uint r = 0; r < KL; ++r) {
    if (kl == r)
      for (uint g = 0; g < max_group; ++g)
        if (g < G)
          for (uint e = 0; e < 4u; ++e) qs[g * D + 4u * c + e] = (r == 0u ? 0.0f : qs[g * D + 4u * c + e]) + acc[4u * g + e];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  for (uint i = tid; i < G * D; i += REDUCE_THREADS) {
    const uint g = i / D, dd = i % D;
    float l = 0.0f;
    for (uint b = 0; b < B; ++b) l += score[g * B + b];
    if (p.splits == 1u) {
      const ulong at = (ulong(tc) * p.heads + kvh * G + g) * D + dd;
      out[at] = p.gated != 0u ? qs[i] / l * sigmoid(gate[at]) : qs[i] / l;
      if (dd == 0u) lse[ulong(t) * p.heads + kvh * G + g] = rescale[g] + log(l);
    } else {
      part_o[(part + g * p.splits) * D + dd] = qs[i];
      if (dd == 0u) {
        part_ml[(part + g * p.splits) * 2u] = rescale[g];
        part_ml[(part + g * p.splits) * 2u + 1u] = l;
      }
    }
  }
}

[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void attention_partial(device const float* q [[buffer(0)]], device const float* k_cache [[buffer(1)]],
                              device const float* v_cache [[buffer(2)]], device float* part_ml [[buffer(3)]],
                              device float* part_o [[buffer(4)]], device float* out [[buffer(5)]],
                              device float* lse [[buffer(6)]], device const float* gate [[buffer(7)]],
                              constant AttentionParams& p [[buffer(8)]],
                              uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float4 qs4[ATTN_MAX_QUERY_FLOATS / 4u];
  threadgroup float score[ATTN_PARTIAL_GROUP * ATTN_SPLIT_BLOCK];  // at the end, each (g, b)'s running sum
  threadgroup float weight[ATTN_PARTIAL_GROUP * ATTN_SPLIT_BLOCK];
  threadgroup float rescale[ATTN_PARTIAL_GROUP];  // at the end, each head's maximum
  float acc[4u * ATTN_PARTIAL_GROUP];  // head g's float4 c at 4g .. 4g+3 (no vector arithmetic in the subset)
  float d[ATTN_SPLIT_KEYS_PER_SIMDGROUP * ATTN_PARTIAL_GROUP];
  attention_partial_span(q, k_cache, v_cache, part_ml, part_o, out, lse, gate, p, group, tid, sg, lane, qs4, score, weight,
                         rescale, acc, d, ATTN_PARTIAL_GROUP);
}

[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void attention_partial_wide(device const float* q [[buffer(0)]], device const float* k_cache [[buffer(1)]],
                              device const float* v_cache [[buffer(2)]], device float* part_ml [[buffer(3)]],
                              device float* part_o [[buffer(4)]], device float* out [[buffer(5)]],
                              device float* lse [[buffer(6)]], device const float* gate [[buffer(7)]],
                              constant AttentionParams& p [[buffer(8)]],
                              uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float4 qs4[ATTN_MAX_QUERY_FLOATS / 4u];
  threadgroup float score[ATTN_MAX_GROUP * ATTN_SPLIT_BLOCK];
  threadgroup float weight[ATTN_MAX_GROUP * ATTN_SPLIT_BLOCK];
  threadgroup float rescale[ATTN_MAX_GROUP];
  float acc[4u * ATTN_MAX_GROUP];
  float d[ATTN_SPLIT_KEYS_PER_SIMDGROUP * ATTN_MAX_GROUP];
  attention_partial_span(q, k_cache, v_cache, part_ml, part_o, out, lse, gate, p, group, tid, sg, lane, qs4, score, weight,
                         rescale, acc, d, ATTN_MAX_GROUP);
}

// out[t0 + t, h] = Σ_s e^(m_s − M)·o_s / Σ_s e^(m_s − M)·l_s, times sigmoid(gate) when p.gated (the
// output gate), and lse[t, h] = M + log Σ_s e^(m_s − M)·l_s (for attention_probs); one threadgroup per
// (head, token): grid (heads, n). The splits' weights go to threadgroup memory; thread (sl, c) sums the
// float4 c of the splits sl, sl + SL, ..., four splits' loads in flight at once; the SL lanes are summed last.
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void attention_combine(device const float* part_ml [[buffer(0)]], device const float* part_o [[buffer(1)]],
                              device float* out [[buffer(2)]], device float* lse [[buffer(3)]],
                              device const float* gate [[buffer(4)]],
                              constant AttentionParams& p [[buffer(5)]], device ushort* xq [[buffer(6)]],
                              device float* de [[buffer(7)]], uint2 group [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float w[ATTN_MAX_SPLITS];
  threadgroup float red[REDUCE_THREADS / 32];
  threadgroup float sum4[REDUCE_THREADS * 4];
  const uint h = group.x, t = group.y, D = p.head_dim, Q4 = D / 4u, S = p.splits;
  const ulong base = (ulong(t) * p.heads + h) * S;

  float ms[ATTN_MAX_SPLITS / REDUCE_THREADS], ls[ATTN_MAX_SPLITS / REDUCE_THREADS];
  float M = -INFINITY;
  for (uint k = 0; k < ATTN_MAX_SPLITS / REDUCE_THREADS; ++k) {
    const ulong at = (base + min(tid + k * REDUCE_THREADS, S - 1u)) * 2u;
    ms[k] = part_ml[at];
    ls[k] = part_ml[at + 1u];
  }
  for (uint k = 0; k < ATTN_MAX_SPLITS / REDUCE_THREADS; ++k) M = max(M, ms[k]);  // clamped copies change no maximum
  M = simd_max(M);
  if (lane == 0u) red[sg] = M;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  M = red[0];
  for (uint i = 1; i < REDUCE_THREADS / 32; ++i) M = max(M, red[i]);  // finite: the first split holds key 0
  float L = 0.0f;
  for (uint k = 0; k < ATTN_MAX_SPLITS / REDUCE_THREADS; ++k) {
    const uint i = tid + k * REDUCE_THREADS;
    const float e = exp(ms[k] - M);  // 0 for an empty split
    if (i < S) w[i] = e;
    L += i < S ? e * ls[k] : 0.0f;
  }
  L = simd_sum(L);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0u) red[sg] = L;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  L = 0.0f;
  for (uint i = 0; i < REDUCE_THREADS / 32; ++i) L += red[i];

  const uint SL = REDUCE_THREADS / Q4, c = tid % Q4, sl = tid / Q4;
  device const float4* o4 = (device const float4*)part_o;
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
  for (uint s0 = sl; s0 < S; s0 += 4u * SL) {
    float4 v[4];
    for (uint u = 0; u < 4u; ++u) {
      const float4 o = o4[(base + min(s0 + u * SL, S - 1u)) * Q4 + c];
      v[u] = o;
    }
    for (uint u = 0; u < 4u; ++u) {
      const float e = s0 + u * SL < S ? w[min(s0 + u * SL, S - 1u)] : 0.0f;
      a0 += e * v[u].x;
      a1 += e * v[u].y;
      a2 += e * v[u].z;
      a3 += e * v[u].w;
    }
  }
  sum4[4u * tid] = a0;
  sum4[4u * tid + 1u] = a1;
  sum4[4u * tid + 2u] = a2;
  sum4[4u * tid + 3u] = a3;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint d = tid; d < D; d += REDUCE_THREADS) {  // with p.int16 whole simdgroups: D a multiple of 32
    float o = 0.0f;
    for (uint r = 0; r < SL; ++r) o += sum4[4u * (r * Q4 + d / 4u) + d % 4u];
    const ulong at = (ulong(p.t0 + t) * p.heads + h) * D + d;
    const float v = p.gated != 0u ? o / L * sigmoid(gate[at]) : o / L;
    out[at] = v;
    if (p.int16 != 0u) store_block_int16(v, xq, de, at / INT16_BLOCK, lane);  // the o_proj GEMV's input
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
