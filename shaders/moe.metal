// Mixture of experts on the GPU: routing (softmax, top-k, renormalisation) and the routed experts.
// Routing never leaves the GPU: the expert ids written by `route` are read by the expert kernels.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// True when a preferred to b for the top-k: forced first, then higher probability, then lower id.
inline bool route_better(uint fa, float pa, uint ea, uint fb, float pb, uint eb) {
  if (fa != fb) return fa > fb;
  if (pa != pb) return pa > pb;
  return ea < eb;
}

// One threadgroup of REDUCE_THREADS per token. probabilities = softmax(logits + bias); bias -inf
// disables an expert (probability 0), +inf forces it into the top-k (its probability is computed
// without the bias). Bit patterns are compared, so fast-math cannot fold the infinities away.
[[max_total_threads_per_threadgroup(REDUCE_THREADS)]] kernel void route(device const float* logits [[buffer(0)]], device const float* bias [[buffer(1)]],
                  device int* ids [[buffer(2)]], device float* weights [[buffer(3)]],
                  device float* probs [[buffer(4)]], constant RouteParams& p [[buffer(5)]],
                  uint t [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                  uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                  uint simdgroups [[simdgroups_per_threadgroup]], uint threads [[threads_per_threadgroup]]) {
  threadgroup float prob[ROUTER_MAX_EXPERTS];
  threadgroup uint flags[ROUTER_MAX_EXPERTS];  // bit 0: forced, bit 1: already chosen
  threadgroup float scratch[32];
  threadgroup uint pick_e[32];
  threadgroup uint chosen[ROUTER_MAX_K];

  const uint E = p.experts;
  device const float* l = logits + ulong(t) * E;
  device const float* b = bias + ulong(t) * E;
  float mx = -INFINITY;
  for (uint e = tid; e < E; e += threads) {
    float v = l[e];
    uint forced = 0u;
    if (p.has_bias != 0u) {
      const uint bits = as_type<uint>(b[e]);
      if (bits == 0x7f800000u) forced = 1u;
      else if (bits == 0xff800000u) v = -INFINITY;
      else v += b[e];
    }
    prob[e] = v;
    flags[e] = forced;
    mx = max(mx, v);
  }
  mx = threadgroup_max(mx, scratch, sg, lane, simdgroups);
  float sum = 0.0f;
  for (uint e = tid; e < E; e += threads) {
    const float ex = prob[e] == -INFINITY ? 0.0f : exp(prob[e] - mx);
    prob[e] = ex;
    sum += ex;
  }
  sum = threadgroup_sum(sum, scratch, sg, lane, simdgroups);
  for (uint e = tid; e < E; e += threads) {
    prob[e] = sum > 0.0f ? prob[e] / sum : 0.0f;
    if (p.has_probs != 0u) probs[ulong(t) * E + e] = prob[e];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // k rounds of a threadgroup-wide arg-best over the experts not yet chosen.
  for (uint s = 0; s < p.k; ++s) {
    uint be = 0xffffffffu, bf = 0u;
    float bp = -1.0f;
    for (uint e = tid; e < E; e += threads) {
      if ((flags[e] & 2u) != 0u) continue;
      const uint f = flags[e] & 1u;
      if (be == 0xffffffffu || route_better(f, prob[e], e, bf, bp, be)) {
        be = e;
        bf = f;
        bp = prob[e];
      }
    }
    for (uint off = 16u; off > 0u; off >>= 1u) {
      const uint oe = simd_shuffle_xor(be, off);
      const uint of = simd_shuffle_xor(bf, off);
      const float op = simd_shuffle_xor(bp, off);
      if (oe != 0xffffffffu && (be == 0xffffffffu || route_better(of, op, oe, bf, bp, be))) {
        be = oe;
        bf = of;
        bp = op;
      }
    }
    if (lane == 0u) pick_e[sg] = be;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0u) {
      uint best = 0xffffffffu;
      for (uint i = 0; i < simdgroups; ++i) {
        const uint e = pick_e[i];
        if (e == 0xffffffffu) continue;
        if (best == 0xffffffffu || route_better(flags[e] & 1u, prob[e], e, flags[best] & 1u, prob[best], best)) best = e;
      }
      chosen[s] = best;
      flags[best] |= 2u;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (tid == 0u) {
    float total = 0.0f;
    for (uint s = 0; s < p.k; ++s) total += prob[chosen[s]];
    for (uint s = 0; s < p.k; ++s) {
      const float w = prob[chosen[s]];
      ids[ulong(t) * p.k + s] = int(chosen[s]);
      weights[ulong(t) * p.k + s] = p.renormalize != 0u && total > 0.0f ? w / total : w;
    }
  }
}

// h[t, s, r] = silu(gate_e[r] · x[t]) * (up_e[r] · x[t]) for e = ids[t, s]; one simdgroup per row r;
// grid (ceil(inter / ROWS_PER_THREADGROUP), k, n).
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void moe_gate_up(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                        device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                        device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                        device const float* x [[buffer(6)]], device const int* ids [[buffer(7)]],
                        device float* h [[buffer(8)]], constant MoeParams& p [[buffer(9)]],
                        uint3 group [[threadgroup_position_in_grid]], uint sg [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  const uint r = group.x * ROWS_PER_THREADGROUP + sg;
  const uint s = group.y, t = group.z;
  if (r >= p.inter) return;
  const uint e = uint(ids[ulong(t) * p.k + s]);
  device const float* xt = x + ulong(t) * p.hidden;
  const bool vec = p.x_vec4 != 0u;
  const float g = row_dot(p.gate, gw + expert_bytes(p.gate, e), gs + expert_scale_bytes(p.gate, e),
                          gb + expert_scale_bytes(p.gate, e), r, xt, vec, lane);
  const float u = row_dot(p.up, uw + expert_bytes(p.up, e), us + expert_scale_bytes(p.up, e),
                          ub + expert_scale_bytes(p.up, e), r, xt, vec, lane);
  if (lane == 0u) h[(ulong(t) * p.k + s) * p.inter + r] = silu(g) * u;
}

// out[t, r] = Σ_s weights[t, s] · (down_e[r] · h[t, s]) for e = ids[t, s]: the down projections and
// the weighted combine in one pass; one simdgroup per output row; grid (ceil(hidden / rows), n).
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void moe_down(device const uchar* dw [[buffer(0)]], device const uchar* ds [[buffer(1)]],
                     device const uchar* db [[buffer(2)]], device const float* h [[buffer(3)]],
                     device const int* ids [[buffer(4)]], device const float* weights [[buffer(5)]],
                     device float* out [[buffer(6)]], constant MoeParams& p [[buffer(7)]],
                     uint2 group [[threadgroup_position_in_grid]], uint sg [[simdgroup_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]]) {
  const uint r = group.x * ROWS_PER_THREADGROUP + sg;
  const uint t = group.y;
  if (r >= p.hidden) return;
  float acc = 0.0f;
  for (uint s = 0; s < p.k; ++s) {
    const uint e = uint(ids[ulong(t) * p.k + s]);
    const float d = row_dot(p.down, dw + expert_bytes(p.down, e), ds + expert_scale_bytes(p.down, e),
                            db + expert_scale_bytes(p.down, e), r, h + (ulong(t) * p.k + s) * p.inter,
                            p.h_vec4 != 0u, lane);
    acc += weights[ulong(t) * p.k + s] * d;
  }
  if (lane == 0u) out[ulong(t) * p.hidden + r] = acc;
}
