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

// One simdgroup per token (grid n, 32 threads): lane l holds experts l, l + 32, ... in registers, so
// the softmax and the k rounds of arg-best are shuffles, with no barriers and no memory round trips.
// probabilities = softmax(logits + bias); bias -inf disables an expert (probability 0), +inf forces it
// into the top-k (its probability is computed without the bias). Bit patterns are compared, so
// fast-math cannot fold the infinities away.
[[max_total_threads_per_threadgroup(32)]] kernel void route(device const float* logits [[buffer(0)]], device const float* bias [[buffer(1)]],
                  device int* ids [[buffer(2)]], device float* weights [[buffer(3)]],
                  device float* probs [[buffer(4)]], constant RouteParams& p [[buffer(5)]],
                  uint t [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  // Loops run to the constant ROUTER_MAX_EXPERTS / 32 (registers need constant indices) and stop at
  // the slots in use, a uniform branch.
  const uint E = p.experts, slots = ROUTER_MAX_EXPERTS / 32u, used = (E + 31u) / 32u;
  device const float* l = logits + ulong(t) * E;
  device const float* b = bias + ulong(t) * E;
  float prob[ROUTER_MAX_EXPERTS / 32u];
  uint forced = 0u, taken = 0u;  // bit i: expert lane + 32 i
  for (uint i = 0; i < slots; ++i) {  // every slot, so that all are defined (the loads are clamped)
    const uint e = min(lane + 32u * i, E - 1u);
    const float bv = p.has_bias != 0u ? b[e] : 0.0f;
    const uint bits = as_type<uint>(bv);
    prob[i] = bits == 0xff800000u ? -INFINITY : bits == 0x7f800000u ? l[e] : l[e] + bv;
    forced |= bits == 0x7f800000u ? 1u << i : 0u;
    if (lane + 32u * i >= E) prob[i] = -INFINITY, taken |= 1u << i;  // past the experts: never chosen
  }
  float mx = -INFINITY;
  for (uint i = 0; i < slots; ++i) {
    if (i >= used) break;
    mx = max(mx, prob[i]);
  }
  mx = simd_max(mx);
  float sum = 0.0f;
  for (uint i = 0; i < slots; ++i) {
    if (i >= used) break;
    prob[i] = prob[i] == -INFINITY ? 0.0f : exp(prob[i] - mx);
    sum += prob[i];
  }
  sum = simd_sum(sum);
  for (uint i = 0; i < slots; ++i) {
    if (i >= used) break;
    prob[i] = sum > 0.0f ? prob[i] / sum : 0.0f;
    if (p.has_probs != 0u && lane + 32u * i < E) probs[ulong(t) * E + lane + 32u * i] = prob[i];
  }

  // k rounds: each lane's best untaken expert, then the best over the simdgroup.
  float total = 0.0f;
  for (uint s = 0; s < p.k; ++s) {
    uint be = 0xffffffffu, bf = 0u;
    float bp = -1.0f;
    for (uint i = 0; i < slots; ++i) {
      if (i >= used) break;
      const uint e = lane + 32u * i, f = (forced >> i) & 1u;
      const bool better = ((taken >> i) & 1u) == 0u && (be == 0xffffffffu || route_better(f, prob[i], e, bf, bp, be));
      be = better ? e : be;
      bf = better ? f : bf;
      bp = better ? prob[i] : bp;
    }
    for (uint off = 16u; off > 0u; off >>= 1u) {
      const uint oe = simd_shuffle_xor(be, off);
      const uint of = simd_shuffle_xor(bf, off);
      const float op = simd_shuffle_xor(bp, off);
      const bool better = oe != 0xffffffffu && (be == 0xffffffffu || route_better(of, op, oe, bf, bp, be));
      be = better ? oe : be;
      bf = better ? of : bf;
      bp = better ? op : bp;
    }
    taken |= be % 32u == lane ? 1u << (be / 32u) : 0u;
    total += bp;
    if (lane == 0u) {
      ids[ulong(t) * p.k + s] = int(be);
      weights[ulong(t) * p.k + s] = bp;  // renormalised below
    }
  }
  if (lane == 0u && p.renormalize != 0u && total > 0.0f)
    for (uint s = 0; s < p.k; ++s) weights[ulong(t) * p.k + s] /= total;
}

// h[t, s, r] = silu(gate_e[r] · x[t]) * (up_e[r] · x[t]) for e = ids[t, s], and for s = k (when
// p.shared) sh[t, r] from the shared expert's gate and up; each simdgroup computes GEMV_ROWS rows r;
// grid (ceil(max(inter, shared_inter) / (GEMV_ROWS · GEMV_SIMDGROUPS)), k + shared, n).
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void moe_gate_up(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                        device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                        device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                        device const float* x [[buffer(6)]], device const int* ids [[buffer(7)]],
                        device float* h [[buffer(8)]], device const uchar* sgw [[buffer(9)]],
                        device const uchar* sgs [[buffer(10)]], device const uchar* sgb [[buffer(11)]],
                        device const uchar* suw [[buffer(12)]], device const uchar* sus [[buffer(13)]],
                        device const uchar* sub [[buffer(14)]], device float* sh [[buffer(15)]],
                        constant MoeParams& p [[buffer(16)]],
                        uint3 group [[threadgroup_position_in_grid]], uint sg [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
  const uint row0 = (group.x * GEMV_SIMDGROUPS + sg) * GEMV_ROWS;
  const uint s = group.y, t = group.z;
  const bool shared = s == p.k;
  const uint rows = shared ? p.shared_inter : p.inter;
  if (row0 >= rows) return;
  const uint count = min(GEMV_ROWS, rows - row0);
  device const float* xt = x + ulong(t) * p.hidden;
  const bool vec = p.x_vec4 != 0u;
  float g[GEMV_ROWS], u[GEMV_ROWS];
  if (shared) {
    rows_dot(p.sgate, sgw, sgs, sgb, row0, count, xt, vec, lane, g);
    rows_dot(p.sup, suw, sus, sub, row0, count, xt, vec, lane, u);
  } else {
    const uint e = uint(ids[ulong(t) * p.k + s]);
    rows_dot(p.gate, gw + expert_bytes(p.gate, e), gs + expert_scale_bytes(p.gate, e), gb + expert_scale_bytes(p.gate, e),
             row0, count, xt, vec, lane, g);
    rows_dot(p.up, uw + expert_bytes(p.up, e), us + expert_scale_bytes(p.up, e), ub + expert_scale_bytes(p.up, e), row0,
             count, xt, vec, lane, u);
  }
  device float* dst = shared ? sh + ulong(t) * p.shared_inter : h + (ulong(t) * p.k + s) * p.inter;
  for (uint r = 0; r < GEMV_ROWS; ++r) {
    const float gv = simd_sum(g[r]), uv = simd_sum(u[r]);
    if (lane == 0u && r < count) dst[row0 + r] = silu(gv) * uv;
  }
}

// out[t, r] = Σ_s weights[t, s] · (down_e[r] · h[t, s]) for e = ids[t, s], plus the gated shared expert
// when p.shared: the down projections and the weighted combine in one pass; each simdgroup computes GEMV_ROWS output rows over all k experts;
// grid (ceil(hidden / (GEMV_ROWS · GEMV_SIMDGROUPS)), n). Quantized experts are read as one virtual
// row of k · inter columns (the k rows of h[t] are contiguous), so the loads of all the experts are
// in flight together rather than one expert after another.
[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void moe_down(device const uchar* dw [[buffer(0)]], device const uchar* ds [[buffer(1)]],
                     device const uchar* db [[buffer(2)]], device const float* h [[buffer(3)]],
                     device const int* ids [[buffer(4)]], device const float* weights [[buffer(5)]],
                     device float* out [[buffer(6)]], device const uchar* sdw [[buffer(7)]],
                     device const uchar* sds [[buffer(8)]], device const uchar* sdb [[buffer(9)]],
                     device const float* sh [[buffer(10)]], device const float* gate_logit [[buffer(11)]],
                     constant MoeParams& p [[buffer(12)]],
                     uint2 group [[threadgroup_position_in_grid]], uint sg [[simdgroup_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]], uint tid [[thread_index_in_threadgroup]],
                     uint threads [[threads_per_threadgroup]]) {
  threadgroup uint slot_expert[ROUTER_MAX_K];
  threadgroup float slot_weight[ROUTER_MAX_K];
  const uint row0 = (group.x * GEMV_SIMDGROUPS + sg) * GEMV_ROWS;
  const uint t = group.y;
  for (uint s = tid; s < p.k; s += threads) {
    slot_expert[s] = uint(ids[ulong(t) * p.k + s]);
    slot_weight[s] = weights[ulong(t) * p.k + s];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (row0 >= p.hidden) return;
  const uint count = min(GEMV_ROWS, p.hidden - row0);
  float acc[GEMV_ROWS];
  for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] = 0.0f;
  device const float* ht = h + ulong(t) * p.k * p.inter;
  const bool q4 = p.down.format == WEIGHT_Q4;
  if (q4 || p.down.format == WEIGHT_Q8) {
    const uint per_word = q4 ? 8u : 4u, words = p.down.row_bytes / 4u, total = words * p.k;
    for (uint w0 = lane; w0 < total; w0 += 32u * MOE_DOWN_UNROLL) {
      uint q[MOE_DOWN_UNROLL][GEMV_ROWS];
      float sc[MOE_DOWN_UNROLL][GEMV_ROWS], bi[MOE_DOWN_UNROLL][GEMV_ROWS], ws[MOE_DOWN_UNROLL];
      for (uint u = 0; u < MOE_DOWN_UNROLL; ++u) {  // unconditional (clamped) loads first
        const uint vw = min(w0 + 32u * u, total - 1u), s = vw / words, wi = vw - s * words;
        const uint e = slot_expert[s], group = wi >> p.down.group_shift;
        ws[u] = w0 + 32u * u < total ? slot_weight[s] : 0.0f;
        for (uint r = 0; r < GEMV_ROWS; ++r) {
          const ulong row = ulong(row0 + min(r, count - 1u));
          q[u][r] = ((device const uint*)(dw + expert_bytes(p.down, e) + row * p.down.row_bytes))[wi];
          const ulong at = expert_scale_bytes(p.down, e) + row * p.down.scale_row_bytes;
          sc[u][r] = load_scale(ds + at, group, p.down.scale_type);
          bi[u][r] = load_scale(db + at, group, p.down.scale_type);
        }
      }
      for (uint u = 0; u < MOE_DOWN_UNROLL; ++u) {
        const uint vw = min(w0 + 32u * u, total - 1u);
        float a, b, c, d, e, f, g, hh;
        load_x4(ht, per_word * vw, p.h_vec4 != 0u, a, b, c, d);
        load_x4(ht, q4 ? 8u * vw + 4u : per_word * vw, p.h_vec4 != 0u, e, f, g, hh);
        const float xs = q4 ? ((a + b) + (c + d)) + ((e + f) + (g + hh)) : (a + b) + (c + d);
        for (uint r = 0; r < GEMV_ROWS; ++r) {
          const uint v = q[u][r];
          const float qx = word_dot(q4, v, a, b, c, d, e, f, g, hh);
          acc[r] += ws[u] * (sc[u][r] * qx + bi[u][r] * xs);  // ws is 0 past the end
        }
      }
    }
  } else {  // dense experts: one expert after another
    float part[GEMV_ROWS];
    for (uint s = 0; s < p.k; ++s) {
      const uint e = slot_expert[s];
      rows_dot(p.down, dw + expert_bytes(p.down, e), ds + expert_scale_bytes(p.down, e), db + expert_scale_bytes(p.down, e),
               row0, count, ht + ulong(s) * p.inter, p.h_vec4 != 0u, lane, part);
      for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] += slot_weight[s] * part[r];
    }
  }
  if (p.shared != 0u) {  // the gated shared expert, weighted per lane like the routed ones
    float part[GEMV_ROWS];
    rows_dot(p.sdown, sdw, sds, sdb, row0, count, sh + ulong(t) * p.shared_inter, p.sh_vec4 != 0u, lane, part);
    const float ws = p.shared_scale * sigmoid(gate_logit[t]);
    for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] += ws * part[r];
  }
  for (uint r = 0; r < GEMV_ROWS; ++r) {
    const float v = simd_sum(acc[r]);
    if (lane == 0u && r < count) out[ulong(t) * p.hidden + row0 + r] = v;
  }
}
