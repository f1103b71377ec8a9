// The gated delta rule over a prompt (the tiled path of backends/gpu/ops/deltanet.cpp), in chunks of
// DELTANET_CHUNK tokens: the WY/UT form of flash-linear-attention's chunk_gated_delta_rule, every product
// in fp32. Math: model-reference.md §2.3.
//
// Why fp32 and not fp16 operands on simdgroup matrices: each chunk's outputs are sums of many terms
// that cancel (V' = U − W·S is the part of the values the state does not predict yet; T = (I + A)⁻¹
// alternates in sign when keys are alike), so one fp16 rounding of K, P, T or V' costs 2⁻¹¹ of the
// large terms, not of the result. With keys as alike as a trained model's (k·k' of 0.9 and more) and
// decays near 1 that is 2-4e-3 of the output, and it grows with the prompt; in fp32 the chunked rule
// agrees with the token-by-token kernel to rounding. The work is small next to the projections: about
// 5.8 M multiply-adds per chunk of 64 tokens and value head at key_dim = value_dim = 128.
#include <metal_stdlib>
using namespace metal;
#include "common.h"

// Per chunk, local tokens i, j, G_i = Σ_{s≤i} g_s (g = log decay), D_ij = exp(G_i − G_j) for i ≥ j:
//   A = strict_lower(diag(β)·K·Kᵀ ⊙ D),  T = (I + A)⁻¹
//   W = T·diag(β·e^G)·K,  U = T·diag(β)·V
//   V' = U − W·S,  O = (Q ⊙ e^G)·S + ((Q·Kᵀ) ⊙ D)·V',  S ← e^{G_last}·S + Kᵀ·(V' ⊙ e^{G_last − G})
// with q, k l2-normalised (q also scaled by key_dim^-½) and β = sigmoid(b). This equals the token-by-token
// rule of `deltanet` (shaders/deltanet.metal); the padding rows of a last, partial chunk have
// q = k = v = β = g = 0 and change neither the outputs nor the state. deltanet_chunk_prep computes
// everything that does not depend on S, for all chunks at once; deltanet_chunk_scan carries S from
// chunk to chunk.

#define CHUNK_LD (DELTANET_CHUNK + 1u)  // padded rows of chunk x chunk matrices in threadgroup memory
#define PREP_SIMDGROUPS (DELTANET_PREFILL_THREADS / 32u)

// One threadgroup per (chunk, value head): grid (chunks, value_heads). Writes, per chunk and head, in the
// scratch arrays: q·e^G and k normalised, v, W, U, P = (Q·Kᵀ) ⊙ D (chunk x chunk, zero above the
// diagonal) and G; and the traces.
[[max_total_threads_per_threadgroup(DELTANET_PREFILL_THREADS)]] kernel void deltanet_chunk_prep(
    device const float* qkv [[buffer(0)]], device const float* b [[buffer(1)]], device const float* a [[buffer(2)]],
    device const float* A_log [[buffer(3)]], device const float* dt_bias [[buffer(4)]], device float* qg [[buffer(5)]],
    device float* kn [[buffer(6)]], device float* vs [[buffer(7)]], device float* w [[buffer(8)]],
    device float* u [[buffer(9)]], device float* pm [[buffer(10)]], device float* gcum [[buffer(11)]],
    device float* trace_beta [[buffer(12)]], device float* trace_decay [[buffer(13)]],
    constant DeltaNetChunkParams& p [[buffer(14)]], uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float beta_s[DELTANET_CHUNK];
  threadgroup float beta_e[DELTANET_CHUNK];  // β·e^G
  threadgroup float G[DELTANET_CHUNK];
  threadgroup float F[DELTANET_CHUNK * CHUNK_LD];  // A, then T = (I + A)⁻¹ in place

  const uint c = group.x, hv = group.y, Dk = p.key_dim, Dv = p.value_dim, Hv = p.value_heads;
  const uint kh = hv / (Hv / p.key_heads), key_total = p.key_heads * Dk, conv_dim = 2u * key_total + Hv * Dv;
  const ulong slot = ulong(c) * Hv + hv;
  device float* Q = qg + slot * DELTANET_CHUNK * Dk;
  device float* K = kn + slot * DELTANET_CHUNK * Dk;
  device float* V = vs + slot * DELTANET_CHUNK * Dv;
  device float* Wc = w + slot * DELTANET_CHUNK * Dk;
  device float* Uc = u + slot * DELTANET_CHUNK * Dv;
  device float* P = pm + slot * DELTANET_CHUNK * DELTANET_CHUNK;
  const float q_scale = 1.0f / sqrt(float(Dk)), neg_A = -exp(A_log[hv]), bias = dt_bias[hv];

  // 1. Per token (a simdgroup each, DELTANET_CHUNK / PREP_SIMDGROUPS in turn): l2 norms, β, g; q, k, v out.
  for (uint i = 0; i < DELTANET_CHUNK / PREP_SIMDGROUPS; ++i) {
    const uint r = sg * (DELTANET_CHUNK / PREP_SIMDGROUPS) + i, t = c * DELTANET_CHUNK + r, tc = min(t, p.n - 1u);
    const bool valid = t < p.n;
    device const float* row = qkv + ulong(tc) * conv_dim;
    float qv[DELTANET_MAX_KEY_DIM / 32u], kv[DELTANET_MAX_KEY_DIM / 32u], vv[DELTANET_MAX_VALUE_DIM / 32u];
    for (uint m = 0; m < DELTANET_MAX_KEY_DIM / 32u; ++m) {  // clamped loads, issued together
      const uint d = min(lane + 32u * m, Dk - 1u);
      qv[m] = row[kh * Dk + d];
      kv[m] = row[key_total + kh * Dk + d];
    }
    for (uint m = 0; m < DELTANET_MAX_VALUE_DIM / 32u; ++m) vv[m] = row[2u * key_total + hv * Dv + min(lane + 32u * m, Dv - 1u)];
    const float bt = b[ulong(tc) * Hv + hv], at = a[ulong(tc) * Hv + hv];
    float qq = 0.0f, kk = 0.0f;
    for (uint m = 0; m < DELTANET_MAX_KEY_DIM / 32u; ++m) {
      const bool in = lane + 32u * m < Dk;
      qq += in ? qv[m] * qv[m] : 0.0f;
      kk += in ? kv[m] * kv[m] : 0.0f;
    }
    qq = simd_sum(qq);
    kk = simd_sum(kk);
    const float qn = valid ? q_scale / sqrt(qq + p.eps) : 0.0f, knorm = valid ? 1.0f / sqrt(kk + p.eps) : 0.0f;
    for (uint m = 0; m < DELTANET_MAX_KEY_DIM / 32u; ++m) {
      const uint d = lane + 32u * m;
      if (d < Dk) {
        Q[r * Dk + d] = qv[m] * qn;
        K[r * Dk + d] = kv[m] * knorm;
      }
    }
    for (uint m = 0; m < DELTANET_MAX_VALUE_DIM / 32u; ++m) {
      const uint d = lane + 32u * m;
      if (d < Dv) V[r * Dv + d] = valid ? vv[m] : 0.0f;
    }
    if (lane == 0u) {
      const float beta = sigmoid(bt), g = neg_A * softplus(at + bias);
      beta_s[r] = valid ? beta : 0.0f;
      G[r] = valid ? g : 0.0f;
      if (valid && p.trace_beta != 0u) trace_beta[ulong(t) * Hv + hv] = beta;
      if (valid && p.trace_decay != 0u) trace_decay[ulong(t) * Hv + hv] = exp(g);
    }
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

  // 2. G = the running sum of g over the chunk (DELTANET_CHUNK = 64: two values per lane).
  if (sg == 0u) {
    const float g0 = G[lane], g1 = G[lane + 32u];
    const float s0 = simd_prefix_inclusive_sum(g0), s1 = simd_prefix_inclusive_sum(g1) + simd_sum(g0);
    G[lane] = s0;
    G[lane + 32u] = s1;
    gcum[slot * DELTANET_CHUNK + lane] = s0;
    gcum[slot * DELTANET_CHUNK + lane + 32u] = s1;
    beta_e[lane] = beta_s[lane] * exp(s0);
    beta_e[lane + 32u] = beta_s[lane + 32u] * exp(s1);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // 3. A = strict_lower(β_i·(k_i·k_j)·D_ij) into F; P = (q_i·k_j)·D_ij (j ≤ i) out. Entry (i, j) of thread
  //    e; the rows of K and Q stay in the cache (64 rows, read 64 times each).
  for (uint e = tid; e < DELTANET_CHUNK * DELTANET_CHUNK; e += DELTANET_PREFILL_THREADS) {
    const uint i = e / DELTANET_CHUNK, j = e % DELTANET_CHUNK;
    device const float* ki = K + i * Dk;
    device const float* qi = Q + i * Dk;
    device const float* kj = K + j * Dk;
    float kk = 0.0f, qk = 0.0f;
    for (uint d = 0; d < Dk; ++d) {
      kk += ki[d] * kj[d];
      qk += qi[d] * kj[d];
    }
    const float decay = exp(i >= j ? G[i] - G[j] : 0.0f);
    F[i * CHUNK_LD + j] = i > j ? beta_s[i] * kk * decay : 0.0f;
    P[e] = i >= j ? qk * decay : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);

  // 4. q·e^G replaces q (the scan's inter-chunk term).
  for (uint e = tid; e < DELTANET_CHUNK * Dk; e += DELTANET_PREFILL_THREADS) Q[e] *= exp(G[e / Dk]);

  // 5. T = (I + A)⁻¹ by forward substitution, row by row in place: T_ic = −Σ_{c≤j<i} A_ij·T_jc, T_ii = 1
  //    (one thread per column; row i of A is read before it is overwritten).
  const uint col = tid % DELTANET_CHUNK;
  for (uint i = 0; i < DELTANET_CHUNK; ++i) {
    float x = 0.0f;
    for (uint j = 0; j < i; ++j) x -= j >= col ? F[i * CHUNK_LD + j] * F[j * CHUNK_LD + col] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid < DELTANET_CHUNK && col <= i) F[i * CHUNK_LD + col] = col == i ? 1.0f : x;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  // 6. W = T·diag(β·e^G)·K and U = T·diag(β)·V (T is lower-triangular: the terms j > i are zero).
  for (uint e = tid; e < DELTANET_CHUNK * (Dk + Dv); e += DELTANET_PREFILL_THREADS) {
    const bool is_w = e < DELTANET_CHUNK * Dk;
    const uint rest = is_w ? e : e - DELTANET_CHUNK * Dk, width = is_w ? Dk : Dv;
    const uint i = rest / width, cc = rest % width;
    device const float* right = (is_w ? K : V) + cc;
    threadgroup const float* scale = is_w ? beta_e : beta_s;
    float acc = 0.0f;
    for (uint j = 0; j < DELTANET_CHUNK; ++j) acc += F[i * CHUNK_LD + j] * scale[j] * right[j * width];
    if (is_w) Wc[rest] = acc;
    else Uc[rest] = acc;
  }
}

#define SCAN_LD (DELTANET_SCAN_COLUMNS + 1u)  // padded rows of the state and V' tiles

// One threadgroup per DELTANET_SCAN_COLUMNS columns of a value head's state, which stays in threadgroup
// memory (fp32) across the chunks: grid (value_heads, value_dim / DELTANET_SCAN_COLUMNS). Reads
// deltanet_chunk_prep's scratch; writes the outputs and, at the end, the state.
[[max_total_threads_per_threadgroup(DELTANET_PREFILL_THREADS)]] kernel void deltanet_chunk_scan(
    device const float* qg [[buffer(0)]], device const float* kn [[buffer(1)]], device const float* w [[buffer(2)]],
    device const float* u [[buffer(3)]], device const float* pm [[buffer(4)]], device const float* gcum [[buffer(5)]],
    device float* state [[buffer(6)]], device float* out [[buffer(7)]], constant DeltaNetChunkParams& p [[buffer(8)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float S[DELTANET_MAX_KEY_DIM * SCAN_LD];
  threadgroup float Vp[DELTANET_CHUNK * SCAN_LD];  // V' = U − W·S
  threadgroup float G[DELTANET_CHUNK];
  threadgroup float tail[DELTANET_CHUNK];  // e^{G_last − G}

  const uint cols = DELTANET_SCAN_COLUMNS;
  const uint hv = group.x, v0 = group.y * cols, Dk = p.key_dim, Dv = p.value_dim, Hv = p.value_heads;
  device float* Sd = state + ulong(hv) * Dk * Dv + v0;
  for (uint e = tid; e < Dk * cols; e += DELTANET_PREFILL_THREADS) S[(e / cols) * SCAN_LD + e % cols] = Sd[ulong(e / cols) * Dv + e % cols];

  for (uint c = 0; c < p.chunks; ++c) {
    const ulong slot = ulong(c) * Hv + hv;
    device const float* Q = qg + slot * DELTANET_CHUNK * Dk;
    device const float* K = kn + slot * DELTANET_CHUNK * Dk;
    device const float* W = w + slot * DELTANET_CHUNK * Dk;
    device const float* U = u + slot * DELTANET_CHUNK * Dv + v0;
    device const float* P = pm + slot * DELTANET_CHUNK * DELTANET_CHUNK;
    if (tid < DELTANET_CHUNK) G[tid] = gcum[slot * DELTANET_CHUNK + tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid < DELTANET_CHUNK) tail[tid] = exp(G[DELTANET_CHUNK - 1u] - G[tid]);

    // V' = U − W·S (entry (r, j) of thread e: the 16 threads of a row read one W row, a broadcast).
    for (uint e = tid; e < DELTANET_CHUNK * cols; e += DELTANET_PREFILL_THREADS) {
      const uint r = e / cols, j = e % cols;
      device const float* wr = W + r * Dk;
      float x = 0.0f;
      for (uint d = 0; d < Dk; ++d) x += wr[d] * S[d * SCAN_LD + j];
      Vp[r * SCAN_LD + j] = U[ulong(r) * Dv + j] - x;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // O = (Q ⊙ e^G)·S + P·V' (P is zero above the diagonal), from the state before this chunk.
    for (uint e = tid; e < DELTANET_CHUNK * cols; e += DELTANET_PREFILL_THREADS) {
      const uint r = e / cols, j = e % cols, t = c * DELTANET_CHUNK + r;
      device const float* qr = Q + r * Dk;
      device const float* pr = P + r * DELTANET_CHUNK;
      float o = 0.0f;
      for (uint d = 0; d < Dk; ++d) o += qr[d] * S[d * SCAN_LD + j];
      for (uint s = 0; s < DELTANET_CHUNK; ++s) o += pr[s] * Vp[s * SCAN_LD + j];
      if (t < p.n) out[ulong(t) * Hv * Dv + ulong(hv) * Dv + v0 + j] = o;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // S ← e^{G_last}·S + Kᵀ·(V' ⊙ e^{G_last − G}).
    const float chunk_decay = exp(G[DELTANET_CHUNK - 1u]);
    for (uint e = tid; e < Dk * cols; e += DELTANET_PREFILL_THREADS) {
      const uint d = e / cols, j = e % cols;
      float s = S[d * SCAN_LD + j] * chunk_decay;
      for (uint r = 0; r < DELTANET_CHUNK; ++r) s += K[r * Dk + d] * tail[r] * Vp[r * SCAN_LD + j];
      S[d * SCAN_LD + j] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (uint e = tid; e < Dk * cols; e += DELTANET_PREFILL_THREADS) Sd[ulong(e / cols) * Dv + e % cols] = S[(e / cols) * SCAN_LD + e % cols];
}
