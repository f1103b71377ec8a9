// The gated delta rule over a prompt (the tiled path of backends/gpu/ops/deltanet.cpp), in chunks of
// DELTANET_CHUNK tokens: the WY/UT form of flash-linear-attention's chunk_gated_delta_rule, with the
// intra-chunk products on simdgroup_matrix (fp16 operands, fp32 accumulation), the triangular solve and
// the state carried across chunks in fp32. Math: model-reference.md §2.3.
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
// chunk to chunk. Square chunk x chunk matrices keep their 8x8 tiles on and below the diagonal only
// (DELTANET_CHUNK_TILES, tile (ti, tj) at lower_tile(ti, tj), rows of 8).

// fp16 values are written as their bits (ushort: the portable subset has no scalar half lvalues in device
// or threadgroup memory) and read only by simdgroup_load, through a half pointer.
inline ushort f16_bits(float v) { return as_type<ushort>(half(v)); }

inline uint lower_tile(uint ti, uint tj) { return ti * (ti + 1u) / 2u + tj; }
inline void lower_tile_at(uint tile, thread uint& ti, thread uint& tj) {
  ti = 0u;
  for (uint r = 1u; r < DELTANET_CHUNK / 8u; ++r) ti += lower_tile(r, 0u) <= tile ? 1u : 0u;
  tj = tile - lower_tile(ti, 0u);
}
// Element (i, j), j ≤ i rounded to the tile, of a lower-tiled matrix.
inline uint lower_at(uint i, uint j) { return lower_tile(i / 8u, j / 8u) * 64u + (i % 8u) * 8u + j % 8u; }

#define PREP_SIMDGROUPS (DELTANET_PREFILL_THREADS / 32u)

// One threadgroup per (chunk, value head): grid (chunks, value_heads). Writes, per chunk and head, in the
// scratch arrays: q·e^G and k normalised, v (fp16; q and k per value head so that nothing is shared
// between threadgroups), W (fp16), U (fp32), P = (Q·Kᵀ) ⊙ D lower-tiled (fp16) and G; and the traces.
[[max_total_threads_per_threadgroup(DELTANET_PREFILL_THREADS)]] kernel void deltanet_chunk_prep(
    device const float* qkv [[buffer(0)]], device const float* b [[buffer(1)]], device const float* a [[buffer(2)]],
    device const float* A_log [[buffer(3)]], device const float* dt_bias [[buffer(4)]], device ushort* qg [[buffer(5)]],
    device ushort* kn [[buffer(6)]], device ushort* vh [[buffer(7)]], device ushort* w [[buffer(8)]],
    device float* u [[buffer(9)]], device ushort* pm [[buffer(10)]], device float* gcum [[buffer(11)]],
    device float* trace_beta [[buffer(12)]], device float* trace_decay [[buffer(13)]],
    constant DeltaNetChunkParams& p [[buffer(14)]], uint2 group [[threadgroup_position_in_grid]],
    uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float beta_s[DELTANET_CHUNK];
  threadgroup float G[DELTANET_CHUNK];
  threadgroup float q_norm[DELTANET_CHUNK];
  threadgroup float F[DELTANET_CHUNK_TILES * 64u];  // K·Kᵀ, then A, then T = (I + A)⁻¹, in place
  threadgroup float E[DELTANET_CHUNK_TILES * 64u];  // Q·Kᵀ
  threadgroup ushort Tw[DELTANET_CHUNK_TILES * 64u];  // T·diag(β·e^G), fp16
  threadgroup ushort Tu[DELTANET_CHUNK_TILES * 64u];  // T·diag(β), fp16
  threadgroup float stage[PREP_SIMDGROUPS * 64u];   // one 8x8 tile per simdgroup, on its way to device memory

  const uint c = group.x, hv = group.y, Dk = p.key_dim, Dv = p.value_dim, Hv = p.value_heads;
  const uint kh = hv / (Hv / p.key_heads), key_total = p.key_heads * Dk, conv_dim = 2u * key_total + Hv * Dv;
  const ulong slot = ulong(c) * Hv + hv;
  device ushort* Q = qg + slot * DELTANET_CHUNK * Dk;
  device ushort* K = kn + slot * DELTANET_CHUNK * Dk;
  device ushort* V = vh + slot * DELTANET_CHUNK * Dv;
  device ushort* Wc = w + slot * DELTANET_CHUNK * Dk;
  device float* Uc = u + slot * DELTANET_CHUNK * Dv;
  device ushort* P = pm + slot * DELTANET_CHUNK_TILES * 64u;
  const float q_scale = 1.0f / sqrt(float(Dk)), neg_A = -exp(A_log[hv]), bias = dt_bias[hv];

  // 1. Per token (a simdgroup each, DELTANET_CHUNK / PREP_SIMDGROUPS in turn): l2 norms, β, g; q, k, v to fp16.
  for (uint i = 0; i < DELTANET_CHUNK / PREP_SIMDGROUPS; ++i) {
    const uint r = sg * (DELTANET_CHUNK / PREP_SIMDGROUPS) + i, t = c * DELTANET_CHUNK + r, tc = min(t, p.n - 1u);
    const bool valid = t < p.n;
    device const float* row = qkv + ulong(tc) * conv_dim;
    float qv[DELTANET_MAX_KEY_DIM / 32u], kv[DELTANET_MAX_KEY_DIM / 32u], vv[DELTANET_MAX_VALUE_DIM / 32u];
    for (uint m = 0; m < DELTANET_MAX_KEY_DIM / 32u; ++m) {  // clamped loads, issued together
      const uint d = min(lane + 32u * m, Dk - 1u), e = min(lane + 32u * m, Dv - 1u);
      qv[m] = row[kh * Dk + d];
      kv[m] = row[key_total + kh * Dk + d];
      vv[m] = row[2u * key_total + hv * Dv + e];
    }
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
        Q[r * Dk + d] = f16_bits(qv[m] * qn);
        K[r * Dk + d] = f16_bits(kv[m] * knorm);
      }
      if (d < Dv) V[r * Dv + d] = f16_bits(valid ? vv[m] : 0.0f);
    }
    if (lane == 0u) {
      const float beta = sigmoid(bt), g = neg_A * softplus(at + bias);
      beta_s[r] = valid ? beta : 0.0f;
      G[r] = valid ? g : 0.0f;
      q_norm[r] = qn;
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
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // 3. K·Kᵀ into F and Q·Kᵀ into E, the tiles on and below the diagonal.
  for (uint job = sg; job < 2u * DELTANET_CHUNK_TILES; job += PREP_SIMDGROUPS) {
    const uint tile = job % DELTANET_CHUNK_TILES;
    uint ti, tj;
    lower_tile_at(tile, ti, tj);
    device const half* left = (device const half*)(job < DELTANET_CHUNK_TILES ? K : Q);
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint d = 0; d < Dk; d += 8u) {
      simdgroup_half8x8 x, y;
      simdgroup_load(x, left, Dk, ulong2(d, ti * 8u));
      simdgroup_load(y, (device const half*)K, Dk, ulong2(d, tj * 8u), true);
      simdgroup_multiply_accumulate(acc, x, y, acc);
    }
    simdgroup_store(acc, (job < DELTANET_CHUNK_TILES ? F : E) + tile * 64u, 8);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);

  // 4. A = strict_lower(β_i·(k_i·k_j)·D_ij) in F; P = (q_i·k_j)·D_ij (j ≤ i) out; then q·e^G replaces q,
  //    from the fp32 input (one rounding to fp16).
  for (uint e = tid; e < DELTANET_CHUNK_TILES * 64u; e += DELTANET_PREFILL_THREADS) {
    uint ti, tj;
    lower_tile_at(e / 64u, ti, tj);
    const uint i = ti * 8u + (e % 64u) / 8u, j = tj * 8u + e % 8u;
    const float decay = exp(i >= j ? G[i] - G[j] : 0.0f);
    F[e] = i > j ? beta_s[i] * F[e] * decay : 0.0f;
    P[e] = f16_bits(i >= j ? E[e] * decay : 0.0f);
  }
  for (uint e = tid; e < DELTANET_CHUNK * Dk; e += DELTANET_PREFILL_THREADS) {
    const uint r = e / Dk, t = min(c * DELTANET_CHUNK + r, p.n - 1u);
    Q[e] = f16_bits(qkv[ulong(t) * conv_dim + kh * Dk + e % Dk] * q_norm[r] * exp(G[r]));
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // 5. T = (I + A)⁻¹ by forward substitution in fp32, row by row in place: T_ic = −Σ_{c≤j<i} A_ij·T_jc,
  //    T_ii = 1 (one thread per column; row i of A is read before it is overwritten).
  const uint col = tid % DELTANET_CHUNK;
  for (uint i = 0; i < DELTANET_CHUNK; ++i) {
    float x = 0.0f;
    for (uint j = 0; j < i; ++j) x -= j >= col ? F[lower_at(i, j)] * F[lower_at(j, min(col, j))] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid < DELTANET_CHUNK && col <= i) F[lower_at(i, col)] = col == i ? 1.0f : x;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  // 6. The right factors of W and U, in fp16 for the matrix units.
  for (uint e = tid; e < DELTANET_CHUNK_TILES * 64u; e += DELTANET_PREFILL_THREADS) {
    uint ti, tj;
    lower_tile_at(e / 64u, ti, tj);
    const uint j = tj * 8u + e % 8u;
    Tw[e] = f16_bits(F[e] * beta_s[j] * exp(G[j]));
    Tu[e] = f16_bits(F[e] * beta_s[j]);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // 7. W = Tw·K and U = Tu·V, tile by tile (lower-triangular left factors: columns tj ≤ ti only).
  const uint kt = Dk / 8u, vt = Dv / 8u;
  for (uint job = sg; job < (DELTANET_CHUNK / 8u) * (kt + vt); job += PREP_SIMDGROUPS) {
    const bool is_w = job < (DELTANET_CHUNK / 8u) * kt;
    const uint rest = job - (is_w ? 0u : (DELTANET_CHUNK / 8u) * kt), width = is_w ? kt : vt;
    const uint ti = rest / width, tc = rest % width, ld = is_w ? Dk : Dv;
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint tj = 0; tj <= ti; ++tj) {
      simdgroup_half8x8 x, y;
      simdgroup_load(x, (threadgroup const half*)(is_w ? Tw : Tu) + lower_tile(ti, tj) * 64u, 8);
      simdgroup_load(y, (device const half*)(is_w ? K : V), ld, ulong2(tc * 8u, tj * 8u));
      simdgroup_multiply_accumulate(acc, x, y, acc);
    }
    simdgroup_store(acc, stage + sg * 64u, 8);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = lane; e < 64u; e += 32u) {
      const uint at = (ti * 8u + e / 8u) * ld + tc * 8u + e % 8u;
      const float v = stage[sg * 64u + e];
      if (is_w) Wc[at] = f16_bits(v);
      else Uc[at] = v;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
  }
}

#define SCAN_F32_LD (DELTANET_SCAN_COLUMNS + 4u)  // padded rows of the fp32 tiles
#define SCAN_F16_LD (DELTANET_SCAN_COLUMNS + 8u)  // and of the fp16 ones

// One threadgroup per DELTANET_SCAN_COLUMNS columns of a value head's state, which stays in threadgroup
// memory (fp32, with an fp16 copy for the matrix units) across the chunks: grid (value_heads,
// value_dim / DELTANET_SCAN_COLUMNS). Reads deltanet_chunk_prep's scratch; writes the outputs and, at
// the end, the state.
[[max_total_threads_per_threadgroup(DELTANET_PREFILL_THREADS)]] kernel void deltanet_chunk_scan(
    device const half* qg [[buffer(0)]], device const half* kn [[buffer(1)]], device const half* w [[buffer(2)]],
    device const float* u [[buffer(3)]], device const half* pm [[buffer(4)]], device const float* gcum [[buffer(5)]],
    device float* state [[buffer(6)]], device float* out [[buffer(7)]], constant DeltaNetChunkParams& p [[buffer(8)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float S[DELTANET_MAX_KEY_DIM * SCAN_F32_LD];
  threadgroup ushort Sh[DELTANET_MAX_KEY_DIM * SCAN_F16_LD];  // fp16
  threadgroup float X[DELTANET_CHUNK * SCAN_F32_LD];  // V', then the chunk's output
  threadgroup ushort Vh[DELTANET_CHUNK * SCAN_F16_LD];  // V', fp16
  threadgroup ushort Vd[DELTANET_CHUNK * SCAN_F16_LD];  // V' ⊙ e^{G_last − G}, fp16
  threadgroup float G[DELTANET_CHUNK];

  const uint cols = DELTANET_SCAN_COLUMNS, ct = DELTANET_SCAN_COLUMNS / 8u;
  const uint hv = group.x, v0 = group.y * cols, Dk = p.key_dim, Dv = p.value_dim, Hv = p.value_heads;
  device float* Sd = state + ulong(hv) * Dk * Dv + v0;
  for (uint e = tid; e < Dk * cols; e += DELTANET_PREFILL_THREADS) {
    const float s = Sd[ulong(e / cols) * Dv + e % cols];
    S[(e / cols) * SCAN_F32_LD + e % cols] = s;
    Sh[(e / cols) * SCAN_F16_LD + e % cols] = f16_bits(s);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  for (uint c = 0; c < p.chunks; ++c) {
    const ulong slot = ulong(c) * Hv + hv;
    device const half* Q = qg + slot * DELTANET_CHUNK * Dk;
    device const half* K = kn + slot * DELTANET_CHUNK * Dk;
    device const half* W = w + slot * DELTANET_CHUNK * Dk;
    device const float* U = u + slot * DELTANET_CHUNK * Dv + v0;
    device const half* P = pm + slot * DELTANET_CHUNK_TILES * 64u;
    if (tid < DELTANET_CHUNK) G[tid] = gcum[slot * DELTANET_CHUNK + tid];

    // W·S into X.
    for (uint job = sg; job < (DELTANET_CHUNK / 8u) * ct; job += PREP_SIMDGROUPS) {
      const uint ti = job / ct, tc = job % ct;
      simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      for (uint d = 0; d < Dk; d += 8u) {
        simdgroup_half8x8 x, y;
        simdgroup_load(x, W, Dk, ulong2(d, ti * 8u));
        simdgroup_load(y, (threadgroup const half*)Sh, SCAN_F16_LD, ulong2(tc * 8u, d));
        simdgroup_multiply_accumulate(acc, x, y, acc);
      }
      simdgroup_store(acc, X, SCAN_F32_LD, ulong2(tc * 8u, ti * 8u));
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // V' = U − W·S in fp16, plain and decayed to the chunk's end; the state decayed over the chunk.
    const float last = G[DELTANET_CHUNK - 1u];
    for (uint e = tid; e < DELTANET_CHUNK * cols; e += DELTANET_PREFILL_THREADS) {
      const uint r = e / cols, j = e % cols;
      const float v = U[ulong(r) * Dv + j] - X[r * SCAN_F32_LD + j];
      Vh[r * SCAN_F16_LD + j] = f16_bits(v);
      Vd[r * SCAN_F16_LD + j] = f16_bits(v * exp(last - G[r]));
    }
    const float chunk_decay = exp(last);
    for (uint e = tid; e < Dk * cols; e += DELTANET_PREFILL_THREADS) S[(e / cols) * SCAN_F32_LD + e % cols] *= chunk_decay;
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // O = (Q ⊙ e^G)·S + P·V' into X; and, independently, S += Kᵀ·(V' ⊙ e^{G_last − G}).
    for (uint job = sg; job < (DELTANET_CHUNK / 8u) * ct; job += PREP_SIMDGROUPS) {
      const uint ti = job / ct, tc = job % ct;
      simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      for (uint d = 0; d < Dk; d += 8u) {
        simdgroup_half8x8 x, y;
        simdgroup_load(x, Q, Dk, ulong2(d, ti * 8u));
        simdgroup_load(y, (threadgroup const half*)Sh, SCAN_F16_LD, ulong2(tc * 8u, d));
        simdgroup_multiply_accumulate(acc, x, y, acc);
      }
      for (uint tj = 0; tj <= ti; ++tj) {
        simdgroup_half8x8 x, y;
        simdgroup_load(x, P + lower_tile(ti, tj) * 64u, 8);
        simdgroup_load(y, (threadgroup const half*)Vh, SCAN_F16_LD, ulong2(tc * 8u, tj * 8u));
        simdgroup_multiply_accumulate(acc, x, y, acc);
      }
      simdgroup_store(acc, X, SCAN_F32_LD, ulong2(tc * 8u, ti * 8u));
    }
    for (uint job = sg; job < (Dk / 8u) * ct; job += PREP_SIMDGROUPS) {
      const uint ti = job / ct, tc = job % ct;
      simdgroup_float8x8 acc;
      simdgroup_load(acc, S, SCAN_F32_LD, ulong2(tc * 8u, ti * 8u));
      for (uint tj = 0; tj < DELTANET_CHUNK / 8u; ++tj) {
        simdgroup_half8x8 x, y;
        simdgroup_load(x, K, Dk, ulong2(ti * 8u, tj * 8u), true);
        simdgroup_load(y, (threadgroup const half*)Vd, SCAN_F16_LD, ulong2(tc * 8u, tj * 8u));
        simdgroup_multiply_accumulate(acc, x, y, acc);
      }
      simdgroup_store(acc, S, SCAN_F32_LD, ulong2(tc * 8u, ti * 8u));
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (uint e = tid; e < DELTANET_CHUNK * cols; e += DELTANET_PREFILL_THREADS) {
      const uint r = e / cols, t = c * DELTANET_CHUNK + r;
      if (t < p.n) out[ulong(t) * Hv * Dv + ulong(hv) * Dv + v0 + e % cols] = X[r * SCAN_F32_LD + e % cols];
    }
    for (uint e = tid; e < Dk * cols; e += DELTANET_PREFILL_THREADS)
      Sh[(e / cols) * SCAN_F16_LD + e % cols] = f16_bits(S[(e / cols) * SCAN_F32_LD + e % cols]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (uint e = tid; e < Dk * cols; e += DELTANET_PREFILL_THREADS)
    Sd[ulong(e / cols) * Dv + e % cols] = S[(e / cols) * SCAN_F32_LD + e % cols];
}
