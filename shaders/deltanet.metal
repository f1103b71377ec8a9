// Gated DeltaNet: the depthwise causal conv + SiLU, and the gated delta rule with an fp32 state
// (docs/model.md §2.3).
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// log(1 + e^x) as torch computes it (x above 20 returns x); small e^x takes the series so that the
// result keeps its relative precision, as log1p does.
inline float softplus(float x) {
  if (x > 20.0f) return x;
  const float e = exp(x);
  return e < 1e-4f ? e * (1.0f - 0.5f * e) : log(1.0f + e);
}

// One thread per channel: out[t, c] = silu(Σ_j w[c, j] · stream[t + j, c]) where stream is the
// `kernel-1` cached raw inputs followed by x; the cache then keeps the last kernel-1 rows of the stream.
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void conv_silu(device const float* x [[buffer(0)]], device float* state [[buffer(1)]],
                      device const float* w [[buffer(2)]], device float* out [[buffer(3)]],
                      constant ConvParams& p [[buffer(4)]], uint c [[thread_position_in_grid]]) {
  const uint past = p.kernel - 1u;
  // Weights (before the wait) and cached inputs into registers with unconditional (clamped) loads,
  // issued together.
  float window[CONV_MAX_KERNEL], wc[CONV_MAX_KERNEL];
  for (uint j = 0; j < CONV_MAX_KERNEL; ++j) wc[j] = w[ulong(min(c, p.channels - 1u)) * p.kernel + min(j, p.kernel - 1u)];
  await_inputs();
  if (c >= p.channels) return;
  for (uint j = 0; j < CONV_MAX_KERNEL; ++j) window[j] = past > 0u ? state[ulong(min(j, past - 1u)) * p.channels + c] : 0.0f;
  for (uint t = 0; t < p.n; ++t) {
    float x_t = x[ulong(t) * p.channels + c];
    float acc = 0.0f;
    for (uint j = 0; j < CONV_MAX_KERNEL; ++j) {
      const float in = j < past ? window[j] : x_t;
      acc += j < p.kernel ? wc[j] * in : 0.0f;
    }
    out[ulong(t) * p.channels + c] = silu(acc);
    for (uint j = 0; j + 1u < CONV_MAX_KERNEL; ++j) window[j] = j + 1u < past ? window[j + 1u] : x_t;
  }
  for (uint j = 0; j < CONV_MAX_KERNEL; ++j)
    if (j < past) state[ulong(j) * p.channels + c] = window[j];
}

// The same for prompts (GpuBackend::tiled), token-parallel: CONV_TOKENS tokens per thread, the rows a
// thread needs (its tokens and the kernel-1 before them) loaded at once, clamped, then combined one
// kernel tap at a time, the window shifted down a row after each: every register array is indexed by
// constants, so none spills to the stack. grid (channels / ELEMENTWISE_THREADS, n / CONV_TOKENS). The
// state is only read here: conv_state_update replaces it once every token has been computed.
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void conv_silu_tokens(
    device const float* x [[buffer(0)]], device const float* state [[buffer(1)]], device const float* w [[buffer(2)]],
    device float* out [[buffer(3)]], constant ConvParams& p [[buffer(4)]], uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]]) {
  const uint C = p.channels, past = p.kernel - 1u;
  const uint c = group.x * ELEMENTWISE_THREADS + tid, cl = min(c, C - 1u);
  const uint t0 = group.y * CONV_TOKENS;
  float win[CONV_TOKENS + CONV_MAX_KERNEL - 1u], acc[CONV_TOKENS];
  for (uint i = 0; i < CONV_TOKENS + CONV_MAX_KERNEL - 1u; ++i) {  // stream row t0 + i
    const uint r = t0 + i;
    const float from_state = past > 0u ? state[ulong(min(r, past - 1u)) * C + cl] : 0.0f;
    const float from_x = x[ulong(min(max(r, past) - past, p.n - 1u)) * C + cl];
    win[i] = r < past ? from_state : from_x;
  }
  for (uint t = 0; t < CONV_TOKENS; ++t) acc[t] = 0.0f;
  for (uint j = 0; j < p.kernel; ++j) {  // win[t] is stream row t0 + t + j here
    const float wj = w[ulong(cl) * p.kernel + j];
    for (uint t = 0; t < CONV_TOKENS; ++t) acc[t] += wj * win[t];
    for (uint i = 0; i + 1u < CONV_TOKENS + CONV_MAX_KERNEL - 1u; ++i) win[i] = win[i + 1u];
  }
  for (uint t = 0; t < CONV_TOKENS; ++t)
    if (t0 + t < p.n && c < C) out[ulong(t0 + t) * C + c] = silu(acc[t]);
}

// The conv state after the chunk: the last kernel-1 rows of the stream, read before any is written
// (a short chunk keeps some of the old rows). One thread per channel.
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void conv_state_update(
    device const float* x [[buffer(0)]], device float* state [[buffer(1)]], constant ConvParams& p [[buffer(2)]],
    uint c [[thread_position_in_grid]]) {
  const uint C = p.channels, past = p.kernel - 1u, cl = min(c, C - 1u);
  float rows[CONV_MAX_KERNEL];
  for (uint j = 0; j < CONV_MAX_KERNEL; ++j) {  // stream row n + j
    const uint r = p.n + j;
    const float from_state = past > 0u ? state[ulong(min(r, past - 1u)) * C + cl] : 0.0f;
    const float from_x = x[ulong(min(max(r, past) - past, p.n - 1u)) * C + cl];
    rows[j] = r < past ? from_state : from_x;
  }
  for (uint j = 0; j < CONV_MAX_KERNEL; ++j)
    if (j < past && c < C) state[ulong(j) * C + c] = rows[j];
}

// The gated delta rule for prompts, part 1: everything that does not depend on the state, for all tokens
// at once. A simdgroup per (token, key head): q and k l2-normalised (q also scaled by key_dim^-½) into
// qk [n, key_heads, 2, DELTANET_MAX_KEY_DIM] (q's row, then k's; zeros past key_dim, so that the
// recurrence reads whole rows without masks), and for each value head of that key head the float4
// gates [n, value_heads] = (decay, β, k·q, k_pair): deltanet_tokens steps tokens t, t + 1 (t even) together,
// and k_pair is what the second token's sums need of the first's k: k_t·k_{t+1} at an even token, k_{t-1}·q_t
// at an odd one (0 without a partner). 4 keys per lane; grid (ceil(n·key_heads / simdgroups)).
[[max_total_threads_per_threadgroup(DELTANET_TOKENS_THREADS)]] kernel void deltanet_prep(
    device const float* qkv [[buffer(0)]], device const float* b [[buffer(1)]], device const float* a [[buffer(2)]],
    device const float* A_log [[buffer(3)]], device const float* dt_bias [[buffer(4)]], device float4* qk [[buffer(5)]],
    device float4* gates [[buffer(6)]], device float* trace_beta [[buffer(7)]], device float* trace_decay [[buffer(8)]],
    constant DeltaNetParams& p [[buffer(9)]], uint group [[threadgroup_position_in_grid]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]]) {
  constexpr uint W4 = DELTANET_MAX_KEY_DIM / 4u;
  const uint Dk = p.key_dim, Hk = p.key_heads, Hv = p.value_heads, key_total = Hk * Dk;
  const uint conv_dim = 2u * key_total + Hv * p.value_dim;
  const uint pair = group * simdgroups + sg, pc = min(pair, p.n * Hk - 1u), t = pc / Hk, kh = pc % Hk;
  const uint partner = t ^ 1u;  // the other token of t's step
  const bool mine = lane * 4u < Dk, even = (t & 1u) == 0u;
  device const float* qr = qkv + ulong(t) * conv_dim + kh * Dk + min(lane * 4u, Dk - 4u);
  device const float* pr = qkv + ulong(min(partner, p.n - 1u)) * conv_dim + key_total + kh * Dk + min(lane * 4u, Dk - 4u);
  float q[4], k[4], kp[4];
  for (uint e = 0; e < 4u; ++e) q[e] = qr[e], k[e] = qr[key_total + e], kp[e] = pr[e];
  float qq = 0.0f, kk = 0.0f, qkd = 0.0f, kpkp = 0.0f, pd = 0.0f;  // pd: the partner's k with t's k (even) or q
  for (uint e = 0; e < 4u; ++e) {
    qq += q[e] * q[e], kk += k[e] * k[e], qkd += q[e] * k[e];
    kpkp += kp[e] * kp[e], pd += (even ? k[e] : q[e]) * kp[e];
  }
  qq = simd_sum(mine ? qq : 0.0f);
  kk = simd_sum(mine ? kk : 0.0f);
  qkd = simd_sum(mine ? qkd : 0.0f);
  kpkp = simd_sum(mine ? kpkp : 0.0f);
  pd = simd_sum(mine ? pd : 0.0f);
  const float q_scale = 1.0f / sqrt(float(Dk)) / sqrt(qq + p.eps), k_scale = 1.0f / sqrt(kk + p.eps);
  const float qn = mine ? q_scale : 0.0f, kn = mine ? k_scale : 0.0f;  // zeros past key_dim in the rows
  const float k_pair = partner < p.n ? pd * (even ? k_scale : q_scale) / sqrt(kpkp + p.eps) : 0.0f;
  if (pair >= p.n * Hk) return;  // after the collectives, which need every lane
  // Written a float at a time: the strict address-space build has no vector stores.
  device float* row = (device float*)(qk + (ulong(t) * Hk + kh) * 2u * W4);
  for (uint e = 0; e < 4u; ++e) row[4u * lane + e] = q[e] * qn, row[4u * (W4 + lane) + e] = k[e] * kn;
  const uint group_heads = Hv / Hk;  // the value heads that read this key head
  for (uint g = lane; g < group_heads; g += 32u) {
    const uint hv = kh * group_heads + g;
    const float beta = sigmoid(b[ulong(t) * Hv + hv]);
    const float decay = exp(-exp(A_log[hv]) * softplus(a[ulong(t) * Hv + hv] + dt_bias[hv]));
    device float* gate = (device float*)(gates + ulong(t) * Hv + hv);
    gate[0] = decay, gate[1] = beta, gate[2] = qkd * q_scale * k_scale, gate[3] = k_pair;
    if (p.trace_beta != 0u) trace_beta[ulong(t) * Hv + hv] = beta;
    if (p.trace_decay != 0u) trace_decay[ulong(t) * Hv + hv] = decay;
  }
}

// The gated delta rule for prompts, part 2: the recurrence of `deltanet` below over deltanet_prep's
// normalised q and k and gates. Tokens go in blocks of DELTANET_BLOCK, copied into threadgroup memory; the
// global reads of the next block are issued before the steps and kept in registers, so their latency
// passes during the steps. A lane holds DELTANET_LANE_COLUMNS (2) adjacent columns of the state for
// DELTANET_MAX_KEY_DIM / DELTANET_PARTS keys (in float4s part, part + DELTANET_PARTS, ... of a staged row:
// 16-byte loads, the lanes of a column on distinct banks), so each staged k and q read serves two
// columns. A step takes two tokens t, u = t + 1 from the state S before both: per column the sums
// A = Sᵀk_t, B = Sᵀq_t, C = Sᵀk_u, D = Sᵀq_u in one pass, then
//   δ_t = β_t(v_t − d_t·A),  o_t = d_t·B + δ_t·(k_t·q_t),
//   δ_u = β_u(v_u − d_u(d_t·C + δ_t·(k_t·k_u))),  o_u = d_u(d_t·D + δ_t·(k_t·q_u)) + δ_u·(k_u·q_u),
//   S = (d_t·d_u)·S + k_t⊗(d_u·δ_t) + k_u⊗δ_u
// (d the decays; k_t·k_u and k_t·q_u are the gates' fourth values): the same recurrence as a token at a
// time, with half the serial chains of sums and shuffles per token and 3 operations per state element for
// two tokens instead of 4. The 8 lanes of a column pair reduce the eight sums with seven shuffles: each
// exchange sends the half of the values its partner keeps, so that lane bit 0 ends with a k or q sum, bit 1
// with the column and bit 2 with the token; four reads then give every lane the four k sums, and so the
// δ of both columns and tokens. The step is what the time goes to, so it has no index arithmetic and no
// masks (keys past key_dim are zeros in the staged rows and add nothing; their state is never stored; a
// block's tokens past n are staged with gates (1, 0, 0, 0), so that a lone last token steps as a pair that
// leaves the state as the token alone would). Columns past value_dim repeat the last and are not stored.
// grid (value_heads, ceil(value_dim / DELTANET_TOKENS_COLUMNS)).
struct DeltaNetBlockInputs {  // a thread's reads of one block (see deltanet_tokens)
  float4 qk[DELTANET_BLOCK * DELTANET_MAX_KEY_DIM / 2u / DELTANET_TOKENS_THREADS];
  float4 gate;
  float v[DELTANET_BLOCK * DELTANET_TOKENS_COLUMNS / DELTANET_TOKENS_THREADS];
};

// Block t0's reads, clamped to the last token (tokens past n are staged, with gates that make their steps
// change nothing): float4 i of the block's q|k rows, the gates of token tid (tid < DELTANET_BLOCK), v of
// (token, column) i.
inline DeltaNetBlockInputs deltanet_block_inputs(device const float* qkv, device const float4* qk,
                                                 device const float4* gates, constant DeltaNetParams& p, uint t0,
                                                 uint hv, uint kh, uint col0, uint tid) {
  constexpr uint ROW4 = DELTANET_MAX_KEY_DIM / 2u;  // float4s of a token's q and k rows
  const uint last = p.n - 1u, conv_dim = 2u * p.key_heads * p.key_dim + p.value_heads * p.value_dim;
  DeltaNetBlockInputs in;
  for (uint i = 0; i < DELTANET_BLOCK * ROW4 / DELTANET_TOKENS_THREADS; ++i) {
    const uint f = tid + DELTANET_TOKENS_THREADS * i;
    const float4 v = qk[(ulong(min(t0 + f / ROW4, last)) * p.key_heads + kh) * ROW4 + f % ROW4];
    in.qk[i] = v;
  }
  const uint t = t0 + min(tid, DELTANET_BLOCK - 1u);
  const float4 gate = gates[ulong(min(t, last)) * p.value_heads + hv];
  in.gate = t <= last ? gate : float4(1.0f, 0.0f, 0.0f, 0.0f);  // decay 1, β 0: δ = 0
  for (uint i = 0; i < DELTANET_BLOCK * DELTANET_TOKENS_COLUMNS / DELTANET_TOKENS_THREADS; ++i) {
    const uint f = tid + DELTANET_TOKENS_THREADS * i, j = min(col0 + f % DELTANET_TOKENS_COLUMNS, p.value_dim - 1u);
    in.v[i] = qkv[ulong(min(t0 + f / DELTANET_TOKENS_COLUMNS, last)) * conv_dim + 2u * p.key_heads * p.key_dim +
                  hv * p.value_dim + j];
  }
  return in;
}

[[max_total_threads_per_threadgroup(DELTANET_TOKENS_THREADS)]] kernel void deltanet_tokens(
    device const float* qkv [[buffer(0)]], device const float4* qk [[buffer(1)]], device const float4* gates [[buffer(2)]],
    device float* state [[buffer(3)]], device float* out [[buffer(4)]], constant DeltaNetParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  constexpr uint W4 = DELTANET_MAX_KEY_DIM / 4u;  // float4s per q or k row
  constexpr uint P = DELTANET_PARTS, F = W4 / DELTANET_PARTS;  // a lane's float4s of a row
  constexpr uint COLUMNS = DELTANET_TOKENS_COLUMNS;
  static_assert(DELTANET_TOKENS_THREADS == 32u * DELTANET_TOKENS_SIMDGROUPS, "the attribute's literal");
  static_assert(P == 8u && DELTANET_LANE_COLUMNS == 2u, "the shuffles below sum over 8 lanes of 2 columns");
  static_assert(W4 % P == 0u && (DELTANET_BLOCK * 2u * W4) % DELTANET_TOKENS_THREADS == 0u &&
                    (DELTANET_BLOCK * COLUMNS) % DELTANET_TOKENS_THREADS == 0u && DELTANET_BLOCK <= DELTANET_TOKENS_THREADS,
                "whole float4s and values per thread and block");
  static_assert(DELTANET_BLOCK % 2u == 0u, "steps of two tokens from an even token");
  threadgroup float4 qks[DELTANET_BLOCK * 2u * W4];  // [token][q | k]
  threadgroup float4 gs[DELTANET_BLOCK];
  threadgroup float2 vs2[DELTANET_BLOCK * COLUMNS / 2u];  // a lane's two columns in one read
  threadgroup float* vs = (threadgroup float*)vs2;

  const uint Dk = p.key_dim, Dv = p.value_dim, Hv = p.value_heads;
  const uint hv = group.x, kh = hv / (Hv / p.key_heads);
  const uint col0 = group.y * COLUMNS, col = 2u * (sg * (32u / P) + lane / P), j = col0 + col;  // the lane's columns j, j + 1
  const uint j0 = min(j, Dv - 1u), j1 = min(j + 1u, Dv - 1u);
  const uint part = lane % P;
  // What the shuffles leave in this lane: a q sum (else k), of column j + 1 (else j), of token u (else t).
  const bool holds_o = (lane & 1u) != 0u, second = (lane & 2u) != 0u, later = (lane & 4u) != 0u;
  const ushort sums_lane = ushort(lane & ~7u);  // the lane left with Sᵀk_t of column j
  const uint token = later ? 1u : 0u, jo = j + (second ? 1u : 0u);  // the output of a lane that holds_o
  const bool writes = holds_o && jo < Dv;
  device float* out_lane = out + ulong(token) * Hv * Dv + ulong(hv) * Dv + jo;

  device float* S = state + ulong(hv) * Dk * Dv;
  float s0[4u * F], s1[4u * F];  // key 4·(part + P·i) + e is s[4i + e]; past key_dim any finite value (clamped), never stored
  for (uint i = 0; i < 4u * F; ++i) {
    const ulong key = min(4u * (part + P * (i / 4u)) + i % 4u, Dk - 1u);
    s0[i] = S[key * Dv + j0], s1[i] = S[key * Dv + j1];
  }

  DeltaNetBlockInputs in = deltanet_block_inputs(qkv, qk, gates, p, 0u, hv, kh, col0, tid);
  for (uint t0 = 0; t0 < p.n; t0 += DELTANET_BLOCK) {
    const uint count = min(DELTANET_BLOCK, p.n - t0);
    for (uint i = 0; i < DELTANET_BLOCK * 2u * W4 / DELTANET_TOKENS_THREADS; ++i)
      store_words((threadgroup half*)(qks + tid + DELTANET_TOKENS_THREADS * i), as_type<uint4>(in.qk[i]));
    if (tid < DELTANET_BLOCK) store_words((threadgroup half*)(gs + tid), as_type<uint4>(in.gate));
    for (uint i = 0; i < DELTANET_BLOCK * COLUMNS / DELTANET_TOKENS_THREADS; ++i) vs[tid + DELTANET_TOKENS_THREADS * i] = in.v[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next block's reads, in flight during the steps (after the last block: the last token again).
    in = deltanet_block_inputs(qkv, qk, gates, p, min(t0 + DELTANET_BLOCK, p.n - 1u), hv, kh, col0, tid);

    for (uint t = 0; t < count; t += 2u) {  // tokens t and u = t + 1 (past n when count is odd)
      const uint u = t + 1u;
      threadgroup const float4* row_t = qks + t * 2u * W4 + part;  // q, then k at + W4
      threadgroup const float4* row_u = row_t + 2u * W4;
      const float4 gt = gs[t], gu = gs[u];
      // x[kind + 2·column + 4·token]: kind 0 Sᵀk, 1 Sᵀq; one chain per sum (eight in flight).
      float x[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, kt[4u * F], ku[4u * F];
      for (uint i = 0; i < F; ++i) {
        const float4 ktf = row_t[W4 + P * i], qtf = row_t[P * i], kuf = row_u[W4 + P * i], quf = row_u[P * i];
        const float ktv[4] = {ktf.x, ktf.y, ktf.z, ktf.w}, qtv[4] = {qtf.x, qtf.y, qtf.z, qtf.w};
        const float kuv[4] = {kuf.x, kuf.y, kuf.z, kuf.w}, quv[4] = {quf.x, quf.y, quf.z, quf.w};
        for (uint e = 0; e < 4u; ++e) {
          const float a0 = s0[4u * i + e], a1 = s1[4u * i + e];
          kt[4u * i + e] = ktv[e], ku[4u * i + e] = kuv[e];
          x[0] += a0 * ktv[e], x[1] += a0 * qtv[e], x[2] += a1 * ktv[e], x[3] += a1 * qtv[e];
          x[4] += a0 * kuv[e], x[5] += a0 * quv[e], x[6] += a1 * kuv[e], x[7] += a1 * quv[e];
        }
      }
      float y[4], z[2];
      for (uint i = 0; i < 4u; ++i)
        y[i] = (holds_o ? x[2u * i + 1u] : x[2u * i]) + simd_shuffle_xor(holds_o ? x[2u * i] : x[2u * i + 1u], ushort(1));
      for (uint i = 0; i < 2u; ++i)
        z[i] = (second ? y[2u * i + 1u] : y[2u * i]) + simd_shuffle_xor(second ? y[2u * i] : y[2u * i + 1u], ushort(2));
      const float sum = (later ? z[1] : z[0]) + simd_shuffle_xor(later ? z[0] : z[1], ushort(4));
      const float A0 = simd_shuffle(sum, sums_lane), A1 = simd_shuffle(sum, ushort(sums_lane | 2u));
      const float C0 = simd_shuffle(sum, ushort(sums_lane | 4u)), C1 = simd_shuffle(sum, ushort(sums_lane | 6u));
      const float dt = gt.x, du = gu.x;
      const float2 vt = vs2[t * (COLUMNS / 2u) + col / 2u], vu = vs2[u * (COLUMNS / 2u) + col / 2u];
      const float delta_t0 = gt.y * (vt.x - dt * A0), delta_t1 = gt.y * (vt.y - dt * A1);
      const float delta_u0 = gu.y * (vu.x - du * (dt * C0 + delta_t0 * gt.w));
      const float delta_u1 = gu.y * (vu.y - du * (dt * C1 + delta_t1 * gt.w));
      // Meaningful where holds_o: o_t, or o_u from its sum, the column's δ_t and δ_u.
      const float delta_t = second ? delta_t1 : delta_t0, delta_u = second ? delta_u1 : delta_u0;
      const float sq = dt * sum + delta_t * (later ? gu.w : gt.z);
      const float o = later ? du * sq + delta_u * gu.z : sq;
      const float dd = dt * du, kt0 = du * delta_t0, kt1 = du * delta_t1;
      for (uint i = 0; i < 4u * F; ++i) {
        s0[i] = s0[i] * dd + kt[i] * kt0 + ku[i] * delta_u0;
        s1[i] = s1[i] * dd + kt[i] * kt1 + ku[i] * delta_u1;
      }
      if (writes && t + token < count) out_lane[ulong(t0 + t) * Hv * Dv] = o;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the next block overwrites the staged tokens
  }
  for (uint i = 0; i < 4u * F; ++i) {  // a constant trip count keeps s0[], s1[] in registers
    const uint key = 4u * (part + P * (i / 4u)) + i % 4u;
    if (key < Dk && j < Dv) S[ulong(key) * Dv + j] = s0[i];
    if (key < Dk && j + 1u < Dv) S[ulong(key) * Dv + j + 1u] = s1[i];
  }
}

// The gated delta rule, token by token:
//   S = exp(g)·S;  m = Sᵀk;  δ = β(v − m);  S += k⊗δ;  o = Sᵀq
// with q, k l2-normalised (q also scaled by key_dim^-½), β = sigmoid(b), g = -exp(A_log)·softplus(a + dt_bias).
// The state S [key_dim, value_dim] of value head hv stays in registers across the tokens: each
// simdgroup owns 8 columns, lane l holds column l % 8 for the quarter l / 8 of the keys, and the
// column sums (m, o) join the quarters with two shuffles. Short register arrays and 8 columns per
// simdgroup let a head spread over many cores; the state-norm trace sums over all columns and needs
// the whole head in one threadgroup. grid (value_heads, value_dim / (8 · simdgroups)).
[[max_total_threads_per_threadgroup(DELTANET_MAX_THREADS)]] kernel void deltanet(device const float* qkv [[buffer(0)]], device const float* b [[buffer(1)]],
                     device const float* a [[buffer(2)]], device const float* A_log [[buffer(3)]],
                     device const float* dt_bias [[buffer(4)]], device float* state [[buffer(5)]],
                     device float* out [[buffer(6)]], device float* trace_beta [[buffer(7)]],
                     device float* trace_decay [[buffer(8)]], device float* trace_norm [[buffer(9)]],
                     constant DeltaNetParams& p [[buffer(10)]], uint2 group [[threadgroup_position_in_grid]],
                     uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]], uint simdgroups [[simdgroups_per_threadgroup]],
                     uint threads [[threads_per_threadgroup]]) {
  threadgroup float q[DELTANET_MAX_KEY_DIM];
  threadgroup float k[DELTANET_MAX_KEY_DIM];
  threadgroup float scratch[64];

  const uint hv = group.x, quarter = lane / 8u, j = (group.y * simdgroups + sg) * 8u + lane % 8u;
  const uint Dk = p.key_dim, Dv = p.value_dim, Hv = p.value_heads;
  const uint per = Dk / 4u, k0 = quarter * per;  // this lane's keys: k0 .. k0 + per - 1
  const uint key_total = p.key_heads * Dk;
  const uint conv_dim = 2u * key_total + Hv * Dv;
  const uint kh = hv / (Hv / p.key_heads);
  const float q_scale = 1.0f / sqrt(float(Dk));
  const float neg_A = -exp(A_log[hv]), dt = dt_bias[hv];  // weights: read before the wait
  device float* S = state + ulong(hv) * Dk * Dv;
  if (group.y == 0u && tid == 0u) prefetch_l2(S, ulong(Dk) * Dv * 4u);  // the head's state, last written a token ago
  await_inputs();

  float s[DELTANET_MAX_KEY_DIM / 4u];
  for (uint i = 0; i < DELTANET_MAX_KEY_DIM / 4u; ++i) s[i] = S[ulong(k0 + min(i, per - 1u)) * Dv + j];  // clamped, unused past `per`

  for (uint t = 0; t < p.n; ++t) {
    device const float* row = qkv + ulong(t) * conv_dim;
    float qq = 0.0f, kk = 0.0f;
    float qv[DELTANET_MAX_KEY_DIM / 32u], kv[DELTANET_MAX_KEY_DIM / 32u];
    for (uint m = 0; m < DELTANET_MAX_KEY_DIM / 32u; ++m) {  // clamped loads, issued together
      const uint i = min(tid + m * threads, Dk - 1u);
      qv[m] = row[kh * Dk + i];
      kv[m] = row[key_total + kh * Dk + i];
    }
    // The token's gates and value with them, before the sums' barriers (loads do not cross those).
    const float bt = b[ulong(t) * Hv + hv], at = a[ulong(t) * Hv + hv], v = row[2u * key_total + hv * Dv + j];
    for (uint m = 0; m < DELTANET_MAX_KEY_DIM / 32u; ++m) {
      const uint i = tid + m * threads;
      if (i < Dk) {
        q[i] = qv[m];
        k[i] = kv[m];
        qq += qv[m] * qv[m];
        kk += kv[m] * kv[m];
      }
    }
    const float2 sums = threadgroup_sum2(qq, kk, scratch, sg, lane, simdgroups);
    const float qn = q_scale / sqrt(sums.x + p.eps), kn = 1.0f / sqrt(sums.y + p.eps);
    const float beta = sigmoid(bt);
    const float decay = exp(neg_A * softplus(at + dt));

    float m = 0.0f;
    for (uint i = 0; i < DELTANET_MAX_KEY_DIM / 4u; ++i) {
      if (i < per) {
        s[i] *= decay;
        m += s[i] * (k[k0 + i] * kn);
      }
    }
    m += simd_shuffle_xor(m, 8u);
    m += simd_shuffle_xor(m, 16u);
    const float delta = beta * (v - m);
    float o = 0.0f, norm2 = 0.0f;
    for (uint i = 0; i < DELTANET_MAX_KEY_DIM / 4u; ++i) {
      if (i < per) {
        s[i] += (k[k0 + i] * kn) * delta;
        o += s[i] * (q[k0 + i] * qn);
        norm2 += s[i] * s[i];
      }
    }
    o += simd_shuffle_xor(o, 8u);
    o += simd_shuffle_xor(o, 16u);
    if (quarter == 0u) out[ulong(t) * Hv * Dv + ulong(hv) * Dv + j] = o;
    if (p.trace_norm != 0u) {
      norm2 = threadgroup_sum(norm2, scratch, sg, lane, simdgroups);
      if (tid == 0u) trace_norm[ulong(t) * Hv + hv] = sqrt(norm2);
    }
    const bool first = group.y == 0u && tid == 0u;
    if (first && p.trace_beta != 0u) trace_beta[ulong(t) * Hv + hv] = beta;
    if (first && p.trace_decay != 0u) trace_decay[ulong(t) * Hv + hv] = decay;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // q and k are overwritten by the next token
  }
  for (uint i = 0; i < DELTANET_MAX_KEY_DIM / 4u; ++i)  // a constant trip count keeps s[] in registers
    if (i < per) S[ulong(k0 + i) * Dv + j] = s[i];
}
