// Mixture of experts on the GPU: routing (softmax, top-k, renormalisation) and the routed experts.
// Routing never leaves the GPU: the expert ids written by `route` are read by the expert kernels.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// One simdgroup per token, lane l holding experts l, l + 32, ... (PER registers: 8 up to 256 experts,
// else ROUTER_MAX_EXPERTS / 32): no threadgroup memory and no barriers, since a decode step waits on
// this kernel between the router and the experts (so each step of its chain counts).
// probabilities = softmax(logits + bias); bias -inf disables an expert (probability 0), +inf forces it
// into the top-k (its probability is computed without the bias). Bit patterns are compared, so
// fast-math cannot fold the infinities away.
// The top-k in k rounds: an expert's key orders it (forced first, then probability; probabilities in
// [0, 1] are non-negative floats, whose bit patterns order like their values and leave bit 30 free for
// "forced"), lower ids win ties. Each round takes the best key of every lane (a lane's experts in id
// order, reduced pairwise over neighbouring ranges, so that strictly better keeps the lower id), the
// best over the lanes, the lowest id holding it, and retires that expert (key 0: chosen; live experts
// hold key + 1, so that probability 0 is still choosable).
template <uint PER>
inline void route_token(device const float* logits, device const float* bias, device int* ids, device float* weights,
                        device float* probs, constant RouteParams& p, uint lane) {
  static_assert(PER % 2u == 0u && (PER & (PER - 1u)) == 0u && ROUTER_MAX_K % 32u == 0u, "whole registers per lane");
  const uint E = p.experts;
  float v[PER];
  uint key[PER];
  float mx = -INFINITY;
  for (uint i = 0; i < PER; ++i) {  // clamped, unconditional loads
    const uint e = lane + 32u * i, ec = min(e, E - 1u);
    const bool live = e < E;
    const float bv = p.has_bias != 0u ? bias[ec] : 0.0f;
    const float lv = logits[ec];
    const uint bits = as_type<uint>(bv);
    key[i] = live && bits == 0x7f800000u ? 1u << 30 : 0u;  // forced, until the probability joins it
    v[i] = !live || bits == 0xff800000u ? -INFINITY : key[i] != 0u ? lv : lv + bv;
    mx = max(mx, v[i]);
  }
  mx = simd_max(mx);
  float sum = 0.0f;
  for (uint i = 0; i < PER; ++i) {
    v[i] = v[i] == -INFINITY ? 0.0f : exp(v[i] - mx);
    sum += v[i];
  }
  sum = simd_sum(sum);
  for (uint i = 0; i < PER; ++i) {
    const uint e = lane + 32u * i;
    const float prob = sum > 0.0f ? v[i] / sum : 0.0f;
    if (p.has_probs != 0u && e < E) probs[e] = prob;
    key[i] = e < E ? (as_type<uint>(prob) | key[i]) + 1u : 0u;
  }
  float chosen[ROUTER_MAX_K / 32u];  // lane l: the probabilities of ranks l, l + 32
  for (uint r = 0; r < ROUTER_MAX_K / 32u; ++r) chosen[r] = 0.0f;
  float total = 0.0f;  // in rank order, as the CPU backend sums
  for (uint rank = 0; rank < p.k; ++rank) {
    uint best[PER / 2u], at[PER / 2u];
    for (uint j = 0; j < PER / 2u; ++j) {
      const bool right = key[2u * j + 1u] > key[2u * j];
      best[j] = right ? key[2u * j + 1u] : key[2u * j];
      at[j] = right ? 2u * j + 1u : 2u * j;
    }
    for (uint s = 1; s < PER / 2u; s *= 2u)
      for (uint j = 0; j + s < PER / 2u; j += 2u * s) {
        const bool right = best[j + s] > best[j];
        best[j] = right ? best[j + s] : best[j];
        at[j] = right ? at[j + s] : at[j];
      }
    const uint top = simd_max(best[0]);
    const uint id = simd_min(best[0] == top ? lane + 32u * at[0] : 0xffffffffu);
    for (uint i = 0; i < PER; ++i)
      if (lane + 32u * i == id) key[i] = 0u;
    const float prob = as_type<float>((top - 1u) & ~(1u << 30));
    total += prob;
    for (uint r = 0; r < ROUTER_MAX_K / 32u; ++r)
      if (rank == lane + 32u * r) chosen[r] = prob;
    if (lane == 0u) ids[rank] = int(id);
  }
  for (uint r = 0; r < ROUTER_MAX_K / 32u; ++r) {
    const uint rank = lane + 32u * r;
    if (rank < p.k) weights[rank] = p.renormalize != 0u && total > 0.0f ? chosen[r] / total : chosen[r];
  }
}

// route_token for token t = the threadgroup.
[[max_total_threads_per_threadgroup(32)]] kernel void route(device const float* logits [[buffer(0)]], device const float* bias [[buffer(1)]],
                  device int* ids [[buffer(2)]], device float* weights [[buffer(3)]],
                  device float* probs [[buffer(4)]], constant RouteParams& p [[buffer(5)]],
                  uint t [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  constexpr uint FEW = 8u;  // registers per lane up to 256 experts (the model's)
  static_assert(ROUTER_MAX_EXPERTS % 32u == 0u && ROUTER_MAX_EXPERTS / 32u >= FEW, "whole registers per lane");
  device const float* l = logits + ulong(t) * p.experts;
  device const float* b = bias + ulong(t) * p.experts;
  device float* pr = probs + ulong(t) * p.experts;
  if (p.experts <= 32u * FEW) route_token<FEW>(l, b, ids + ulong(t) * p.k, weights + ulong(t) * p.k, pr, p, lane);
  else route_token<ROUTER_MAX_EXPERTS / 32u>(l, b, ids + ulong(t) * p.k, weights + ulong(t) * p.k, pr, p, lane);
}

// moe_gate_up's input row: x (vec: 16-byte aligned), or with INT16 its int16 blocks xq, de.
struct GateUpInput {
  device const float* x;
  bool vec;
  device const uint4* xq;
  device const float2* de;
};
template <bool INT16>
inline void gate_up_rows_dot(constant WeightDesc& w, device const uchar* data, device const uchar* scales,
                             device const uchar* biases, uint row0, uint count, thread const GateUpInput& in, uint lane,
                             thread float* acc) {
  if (INT16) rows_dot_int16(w, data, scales, biases, row0, count, in.xq, in.de, lane, 0u, 1u, acc);
  else rows_dot(w, data, scales, biases, row0, count, in.x, in.vec, lane, 0u, 1u, acc);
}

// The first of the GEMV_ROWS rows of moe_gate_up that this simdgroup's gate/up pair computes.
inline uint gate_up_row0(uint3 group, uint sg) { return (group.x * (GEMV_SIMDGROUPS / 2u) + sg / 2u) * GEMV_ROWS; }

// Before the routing is known: the shared expert's rows that this simdgroup reads (prefetch_rows).
inline void moe_gate_up_prefetch_shared(device const uchar* sgw, device const uchar* sgs, device const uchar* sgb,
                                        device const uchar* suw, device const uchar* sus, device const uchar* sub,
                                        constant MoeParams& p, uint3 group, uint sg, uint lane) {
  const uint row0 = gate_up_row0(group, sg);
  if (group.y != p.k || row0 >= p.shared_inter) return;
  const uint count = min(GEMV_ROWS, p.shared_inter - row0);
  if ((sg & 1u) != 0u) prefetch_rows(p.sup, suw, sus, sub, row0, count, lane);
  else prefetch_rows(p.sgate, sgw, sgs, sgb, row0, count, lane);
}

// Once the routing is known: moe_down, the next launch, reads all `hidden` rows of the down projection
// of each chosen expert; the threadgroups of an expert's slot each ask for a share of them (simdgroup 0).
inline void moe_down_prefetch(device const uchar* dw, device const uchar* ds, device const uchar* db, device const int* ids,
                              constant MoeParams& p, uint3 group, uint3 groups, uint sg, uint lane) {
  const uint per = (p.hidden + groups.x - 1u) / groups.x, row0 = group.x * per;
  if (group.y >= p.k || sg != 0u || row0 >= p.hidden) return;
  const uint e = uint(ids[ulong(group.z) * p.k + group.y]);
  prefetch_rows(p.down, dw + expert_bytes(p.down, e), ds + expert_scale_bytes(p.down, e), db + expert_scale_bytes(p.down, e),
                row0, min(per, p.hidden - row0), lane);
}

// h[t, s, r] = silu(gate_e[r] · x[t]) * (up_e[r] · x[t]) for e = ids[t, s], and for s = k (when
// p.shared) sh[t, r] from the shared expert's gate and up; with INT16 (moe_gate_up_int16, the fp16
// precision's) the products are integer, on x's int16 blocks (xq, de). Simdgroups come in pairs: the
// even one computes GEMV_ROWS rows of gate, the odd one the same rows of up (their loads in flight at
// once), and the even one combines them through threadgroup memory;
// grid (ceil(max(inter, shared_inter) / (GEMV_ROWS · GEMV_SIMDGROUPS / 2)), k + shared, n).
template <bool INT16>
inline void moe_gate_up_rows(device const uchar* gw, device const uchar* gs, device const uchar* gb, device const uchar* uw,
                             device const uchar* us, device const uchar* ub, device const float* x, device const int* ids,
                             device float* h, device const uchar* sgw, device const uchar* sgs, device const uchar* sgb,
                             device const uchar* suw, device const uchar* sus, device const uchar* sub, device float* sh,
                             constant MoeParams& p, device const uint4* xq, device const float2* de, uint3 group, uint sg,
                             uint lane, threadgroup float* partial) {
  const uint row0 = gate_up_row0(group, sg);
  const uint s = group.y, t = group.z;
  const bool shared = s == p.k, up = (sg & 1u) != 0u;
  const uint rows = shared ? p.shared_inter : p.inter;
  const bool live = row0 < rows;
  const uint count = live ? min(GEMV_ROWS, rows - row0) : 0u;
  const GateUpInput in{x + ulong(t) * p.hidden, p.x_vec4 != 0u, xq + ulong(t) * (p.hidden / INT16_BLOCK) * 4u,
                       de + ulong(t) * (p.hidden / INT16_BLOCK)};
  float acc[GEMV_ROWS];
  for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] = 0.0f;
  if (live) {
    if (shared) {
      if (up) gate_up_rows_dot<INT16>(p.sup, suw, sus, sub, row0, count, in, lane, acc);
      else gate_up_rows_dot<INT16>(p.sgate, sgw, sgs, sgb, row0, count, in, lane, acc);
    } else {
      const uint e = uint(ids[ulong(t) * p.k + s]);
      if (up)
        gate_up_rows_dot<INT16>(p.up, uw + expert_bytes(p.up, e), us + expert_scale_bytes(p.up, e),
                                ub + expert_scale_bytes(p.up, e), row0, count, in, lane, acc);
      else
        gate_up_rows_dot<INT16>(p.gate, gw + expert_bytes(p.gate, e), gs + expert_scale_bytes(p.gate, e),
                                gb + expert_scale_bytes(p.gate, e), row0, count, in, lane, acc);
    }
  }
  for (uint r = 0; r < GEMV_ROWS; ++r) {
    const float v = simd_sum(acc[r]);
    if (lane == 0u) partial[sg * GEMV_ROWS + r] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  device float* dst = shared ? sh + ulong(t) * p.shared_inter : h + (ulong(t) * p.k + s) * p.inter;
  if (!up && lane < count) dst[row0 + lane] = silu(partial[sg * GEMV_ROWS + lane]) * partial[(sg + 1u) * GEMV_ROWS + lane];
}

[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void moe_gate_up(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                        device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                        device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                        device const float* x [[buffer(6)]], device const int* ids [[buffer(7)]],
                        device float* h [[buffer(8)]], device const uchar* sgw [[buffer(9)]],
                        device const uchar* sgs [[buffer(10)]], device const uchar* sgb [[buffer(11)]],
                        device const uchar* suw [[buffer(12)]], device const uchar* sus [[buffer(13)]],
                        device const uchar* sub [[buffer(14)]], device float* sh [[buffer(15)]],
                        constant MoeParams& p [[buffer(16)]], device const uint4* xq [[buffer(17)]],
                        device const float2* de [[buffer(18)]], device const uchar* dw [[buffer(19)]],
                        device const uchar* ds [[buffer(20)]], device const uchar* db [[buffer(21)]],
                        uint3 group [[threadgroup_position_in_grid]], uint3 groups [[threadgroups_per_grid]],
                        uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[GEMV_SIMDGROUPS * GEMV_ROWS];
  moe_gate_up_prefetch_shared(sgw, sgs, sgb, suw, sus, sub, p, group, sg, lane);
  await_inputs();
  moe_down_prefetch(dw, ds, db, ids, p, group, groups, sg, lane);
  moe_gate_up_rows<false>(gw, gs, gb, uw, us, ub, x, ids, h, sgw, sgs, sgb, suw, sus, sub, sh, p, xq, de, group, sg, lane,
                          partial);
}

[[max_total_threads_per_threadgroup(GEMV_THREADS)]] kernel void moe_gate_up_int16(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                        device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                        device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                        device const float* x [[buffer(6)]], device const int* ids [[buffer(7)]],
                        device float* h [[buffer(8)]], device const uchar* sgw [[buffer(9)]],
                        device const uchar* sgs [[buffer(10)]], device const uchar* sgb [[buffer(11)]],
                        device const uchar* suw [[buffer(12)]], device const uchar* sus [[buffer(13)]],
                        device const uchar* sub [[buffer(14)]], device float* sh [[buffer(15)]],
                        constant MoeParams& p [[buffer(16)]], device const uint4* xq [[buffer(17)]],
                        device const float2* de [[buffer(18)]], device const uchar* dw [[buffer(19)]],
                        device const uchar* ds [[buffer(20)]], device const uchar* db [[buffer(21)]],
                        uint3 group [[threadgroup_position_in_grid]], uint3 groups [[threadgroups_per_grid]],
                        uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float partial[GEMV_SIMDGROUPS * GEMV_ROWS];
  moe_gate_up_prefetch_shared(sgw, sgs, sgb, suw, sus, sub, p, group, sg, lane);
  await_inputs();
  moe_down_prefetch(dw, ds, db, ids, p, group, groups, sg, lane);
  moe_gate_up_rows<true>(gw, gs, gb, uw, us, ub, x, ids, h, sgw, sgs, sgb, suw, sus, sub, sh, p, xq, de, group, sg, lane,
                          partial);
}

// out[t, r] = Σ_s weights[t, s] · (down_e[r] · h[t, s]) for e = ids[t, s], plus the gated shared expert
// when p.shared: the down projections and the weighted combine in one pass. p.split simdgroups share
// GEMV_ROWS output rows (split-K over all k experts; the first adds the parts up);
// grid (ceil(hidden · split / (GEMV_ROWS · GEMV_SIMDGROUPS)), n). Quantized experts are read as one
// virtual row of k · inter columns (the k rows of h[t] are contiguous), so the loads of all the
// experts are in flight together rather than one expert after another.
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
  threadgroup uint slot_row[ROUTER_MAX_K];  // the slot's expert's first row in the stack
  threadgroup float partial[GEMV_SIMDGROUPS * GEMV_ROWS];
  const uint parts = p.split, part = sg % parts;
  const uint row0 = (group.x * (GEMV_SIMDGROUPS / parts) + sg / parts) * GEMV_ROWS;
  const uint t = group.y;
  if (p.shared != 0u && part == 0u && row0 < p.hidden) prefetch_rows(p.sdown, sdw, sds, sdb, row0, min(GEMV_ROWS, p.hidden - row0), lane);
  await_inputs();
  for (uint s = tid; s < p.k; s += threads) {
    slot_expert[s] = uint(ids[ulong(t) * p.k + s]);
    slot_weight[s] = weights[ulong(t) * p.k + s];
    slot_row[s] = slot_expert[s] * p.down.rows;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const bool live = row0 < p.hidden;
  const uint count = live ? min(GEMV_ROWS, p.hidden - row0) : 0u;
  float acc[GEMV_ROWS];
  for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] = 0.0f;
  device const float* ht = h + ulong(t) * p.k * p.inter;
  const bool q4 = p.down.format == WEIGHT_Q4;
  if (live && q4 && p.down.scale_type == SCALE_BF16 && p.h_vec4 != 0u && p.down.row_word_shift != ROW_WORDS_ANY) {
    // MLX 4-bit experts with bf16 scales and biases (the checkpoints' form), the loop below without its
    // per-word switches: a word's slot by a shift, each row's address from the slot's first row.
    const uint words = 1u << p.down.row_word_shift, total = words * p.k, step = 32u * parts;
    device const float4* h4 = (device const float4*)ht;
    for (uint w0 = 32u * part + lane; w0 < total; w0 += step * MOE_DOWN_UNROLL) {
      uint q[MOE_DOWN_UNROLL][GEMV_ROWS];
      float sc[MOE_DOWN_UNROLL][GEMV_ROWS], bi[MOE_DOWN_UNROLL][GEMV_ROWS], ws[MOE_DOWN_UNROLL];
      for (uint u = 0; u < MOE_DOWN_UNROLL; ++u) {  // unconditional (clamped) loads first
        const uint vw = min(w0 + step * u, total - 1u), s = vw >> p.down.row_word_shift, wi = vw & (words - 1u);
        const uint first = slot_row[s] + row0, group = wi >> p.down.group_shift;
        ws[u] = w0 + step * u < total ? slot_weight[s] : 0.0f;
        for (uint r = 0; r < GEMV_ROWS; ++r) {
          const ulong row = ulong(first + min(r, count - 1u));
          q[u][r] = ((device const uint*)(dw + row * p.down.row_bytes))[wi];
          sc[u][r] = bf16_bits_to_float(((device const ushort*)(ds + row * p.down.scale_row_bytes))[group]);
          bi[u][r] = bf16_bits_to_float(((device const ushort*)(db + row * p.down.scale_row_bytes))[group]);
        }
      }
      for (uint u = 0; u < MOE_DOWN_UNROLL; ++u) {
        const uint vw = min(w0 + step * u, total - 1u);
        const float4 lo = h4[2u * vw], hi = h4[2u * vw + 1u];
        const float xs = ((lo.x + lo.y) + (lo.z + lo.w)) + ((hi.x + hi.y) + (hi.z + hi.w));
        for (uint r = 0; r < GEMV_ROWS; ++r) {
          const float qx = word_dot(true, q[u][r], lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
          acc[r] += ws[u] * (sc[u][r] * qx + bi[u][r] * xs);  // ws is 0 past the end
        }
      }
    }
  } else if (live && (q4 || p.down.format == WEIGHT_Q8)) {
    const uint per_word = q4 ? 8u : 4u, words = p.down.row_bytes / 4u, total = words * p.k, step = 32u * parts;
    for (uint w0 = 32u * part + lane; w0 < total; w0 += step * MOE_DOWN_UNROLL) {
      uint q[MOE_DOWN_UNROLL][GEMV_ROWS];
      float sc[MOE_DOWN_UNROLL][GEMV_ROWS], bi[MOE_DOWN_UNROLL][GEMV_ROWS], ws[MOE_DOWN_UNROLL];
      for (uint u = 0; u < MOE_DOWN_UNROLL; ++u) {  // unconditional (clamped) loads first
        const uint vw = min(w0 + step * u, total - 1u), s = vw / words, wi = vw - s * words;
        const uint e = slot_expert[s], group = wi >> p.down.group_shift;
        ws[u] = w0 + step * u < total ? slot_weight[s] : 0.0f;
        for (uint r = 0; r < GEMV_ROWS; ++r) {
          const ulong row = ulong(row0 + min(r, count - 1u));
          q[u][r] = ((device const uint*)(dw + expert_bytes(p.down, e) + row * p.down.row_bytes))[wi];
          const ulong at = expert_scale_bytes(p.down, e) + row * p.down.scale_row_bytes;
          sc[u][r] = load_scale(ds + at, group, p.down.scale_type);
          bi[u][r] = load_scale(db + at, group, p.down.scale_type);
        }
      }
      for (uint u = 0; u < MOE_DOWN_UNROLL; ++u) {
        const uint vw = min(w0 + step * u, total - 1u);
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
  } else if (live) {  // dense experts: one expert after another
    float dot[GEMV_ROWS];
    for (uint s = 0; s < p.k; ++s) {
      const uint e = slot_expert[s];
      rows_dot(p.down, dw + expert_bytes(p.down, e), ds + expert_scale_bytes(p.down, e), db + expert_scale_bytes(p.down, e),
               row0, count, ht + ulong(s) * p.inter, p.h_vec4 != 0u, lane, part, parts, dot);
      for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] += slot_weight[s] * dot[r];
    }
  }
  if (live && p.shared != 0u) {  // the gated shared expert, weighted per lane like the routed ones
    float dot[GEMV_ROWS];
    rows_dot(p.sdown, sdw, sds, sdb, row0, count, sh + ulong(t) * p.shared_inter, p.sh_vec4 != 0u, lane, part, parts, dot);
    const float ws = p.shared_scale * sigmoid(gate_logit[t]);
    for (uint r = 0; r < GEMV_ROWS; ++r) acc[r] += ws * dot[r];
  }
  const float v = block_rows_sum(acc, partial, sg, lane, parts);
  if (part == 0u && lane < count) out[ulong(t) * p.hidden + row0 + lane] = v;
}
