// Causal prefill attention on the matrix units (flash attention): one pass over the keys with an online
// softmax, QKᵀ and PV as 16x16 by 16x8 simdgroup matrix products (fp16 operands, fp32 accumulation),
// the output gate in the epilogue. Math: model-reference.md §2.4; the split-K kernels of attention.metal
// serve decode, the fp32 precision and the softmax-weights capture.
//
// Query rows are (token, query head) pairs of one KV head, token-major: the G heads that share a KV
// head sit in consecutive rows, so every K/V tile loaded into threadgroup memory serves all of them
// (GQA). A threadgroup takes ATTN_PREFILL_ROWS rows, ATTN_PREFILL_SIMDGROUP_ROWS (16) per simdgroup,
// whose query fragments and output accumulator stay in registers, and walks the keys 0 .. the last
// row's position in tiles of BK; keys past a row's position are masked, tiles past every row's are
// never loaded. The KV cache ([position, kv_heads, head_dim], half: the cache type at this precision)
// is read in 16-byte runs of K and 8-byte runs of V, copied into the tiles as stored.
//
// The running maximum is lazy: a row's probabilities are exp2(s − m) against the maximum m last
// adopted, and m moves only when a tile's maximum exceeds it by ATTN_PREFILL_RESCALE (log2 units). The
// weights written for PV then stay ≤ 2^ATTN_PREFILL_RESCALE (well inside half's range) and the fp32
// accumulator is rescaled only on the rare tiles that move m: the portable subset has no per-lane
// access to a matrix, so a rescale goes through threadgroup memory.
#include <metal_stdlib>
using namespace metal;
#include "tiles.h"

// Threadgroup memory. The K tile holds BK rows of D halves, the V tile DV rows of BK halves (the value
// dimensions the threadgroup computes: D, or half of it for attention_prefill_256_halves; V
// transposed: PV reads it as the product's second operand in the layout that K has for QKᵀ); rows
// padded by 8 halves (16-byte aligned rows, staggered banks). Before the first tile the same memory
// stages the queries, ATTN_PREFILL_ROWS rows of at most ATTN_PREFILL_QUERY_COLUMNS columns at a time.
// Each simdgroup has a score tile (16 x BK floats, padded by 4), which also holds its weights (16 x BK
// halves, padded by 8) and stages its accumulator for a rescale and the epilogue.
#define ATTN_PREFILL_QUERY_PASS(D) ((D) < ATTN_PREFILL_QUERY_COLUMNS ? (D) : ATTN_PREFILL_QUERY_COLUMNS)
#define ATTN_PREFILL_KV_HALVES(D, DV, BK) ((BK) * ((D) + 8u) + (DV) * ((BK) + 8u))
#define ATTN_PREFILL_QUERY_HALVES(D) (ATTN_PREFILL_ROWS * (ATTN_PREFILL_QUERY_PASS(D) + 8u))
#define ATTN_PREFILL_OUT_HALVES(DV) \
  (ATTN_PREFILL_ROWS * 2u * (((DV) < ATTN_PREFILL_OUT_COLUMNS ? (DV) : ATTN_PREFILL_OUT_COLUMNS) + 4u))
#define ATTN_PREFILL_MAX3(a, b, c) ((a) > (b) ? ((a) > (c) ? (a) : (c)) : ((b) > (c) ? (b) : (c)))
#define ATTN_PREFILL_TILE_WORDS(D, DV, BK) \
  (ATTN_PREFILL_MAX3(ATTN_PREFILL_KV_HALVES(D, DV, BK), ATTN_PREFILL_QUERY_HALVES(D), ATTN_PREFILL_OUT_HALVES(DV)) / 8u)
#define ATTN_PREFILL_SCORE_WORDS(BK) (ATTN_PREFILL_SIMDGROUPS * ATTN_PREFILL_SIMDGROUP_ROWS * ((BK) + 4u) / 4u)

// The V tile's row of dimension 4·group + i. Within each 32 dimensions, row 8i + e holds dimension
// 4e + i: a thread transposes 4 dimensions (4 rows) of 8 keys, and the 8 lanes of a quarter
// warp then store to 8 rows that fall on distinct banks (consecutive dimensions would share two).
inline uint v_row(uint group, uint i) { return 32u * (group / 8u) + 8u * i + group % 8u; }
// The dimension of the output held in accumulator column c: the same permutation.
inline uint column_dim(uint c) { return 32u * (c / 32u) + 4u * (c % 8u) + (c % 32u) / 8u; }

// The kernel body for head dimension D and BK keys per tile, the output's value dimensions dv0 ..
// dv0 + DV - 1 (D, DV and BK constants at each call, so that the loops unroll and the matrix arrays stay
// in registers). Simdgroup matrices come in pairs of row blocks:
// [2x] rows 0-7, [2x + 1] rows 8-15 of the simdgroup's 16 rows.
inline void attention_prefill_rows(device const float* q, device const half* k_cache, device const half* v_cache,
                                   device const float* gate, device float* out, constant AttentionPrefillParams& p,
                                   threadgroup half* tiles, threadgroup float* scores, const uint D, const uint DV,
                                   const uint BK, uint tile, uint kvh, uint dv0, uint tid, uint sg, uint lane) {
  const uint KLD = D + 8u, VLD = BK + 8u, SLD = BK + 4u, PLD = BK + 8u;
  const uint QC = D < ATTN_PREFILL_QUERY_COLUMNS ? D : ATTN_PREFILL_QUERY_COLUMNS, QLD = QC + 8u;
  const uint G = p.group, rows = p.n * G, kv_width = p.kv_heads * D;
  // Latest tiles (the longest, causally) first: they then finish with the rest.
  const uint r0 = (p.tiles - 1u - tile) * ATTN_PREFILL_ROWS;
  const uint last_token = (min(r0 + ATTN_PREFILL_ROWS, rows) - 1u) / G;
  const uint keys = p.pos0 + last_token + 1u;  // keys the tile's last row attends to
  threadgroup half* kt = tiles;             // [BK][KLD]
  threadgroup half* vt = tiles + BK * KLD;  // [DV][VLD], rows by v_row

  // This lane's softmax row (2 lanes per row, BK/2 columns each) and the row's causal limit.
  const uint row = lane / 2u, part = lane % 2u, per_lane = BK / 2u;
  const uint my_row = min(r0 + sg * ATTN_PREFILL_SIMDGROUP_ROWS + row, rows - 1u);
  const uint my_len = p.pos0 + my_row / G + 1u;
  threadgroup float* sc = scores + sg * ATTN_PREFILL_SIMDGROUP_ROWS * SLD;
  threadgroup half* pw = (threadgroup half*)sc;

  // Query rows, scaled by 1/sqrt(D)·log2(e) and rounded to half, staged in passes of QC columns into
  // registers as 16x16 fragments: qm[4s ..4s+3] the quadrants of columns 16s .. 16s+15.
  simdgroup_half8x8 qm[ATTN_PREFILL_MAX_HEAD_DIM / 4u];
  for (uint c0 = 0; c0 < D; c0 += QC) {
    for (uint i = 0; i < ATTN_PREFILL_ROWS * QC / 8u / ATTN_PREFILL_THREADS; ++i) {
      const uint run = tid + i * ATTN_PREFILL_THREADS, rr = run / (QC / 8u), c = 8u * (run % (QC / 8u));
      const uint r = min(r0 + rr, rows - 1u), t = r / G, h = kvh * G + r % G;
      device const float* src = q + (ulong(t) * p.heads + h) * D + c0 + c;
      store_run(tiles + rr * QLD + c, src[0] * p.scale, src[1] * p.scale, src[2] * p.scale, src[3] * p.scale,
                src[4] * p.scale, src[5] * p.scale, src[6] * p.scale, src[7] * p.scale);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // Every fragment index a constant (a loop over s with a uniform test, not over the pass's columns):
    // indexed at run time, the fragments would live in local memory under CUDA.
    for (uint s = 0; s < D / 16u; ++s)
      if (16u * s >= c0 && 16u * s < c0 + QC)
        simdgroup_load4(qm[4u * s], qm[4u * s + 1u], qm[4u * s + 2u], qm[4u * s + 3u], tiles, QLD,
                        ulong2(16u * s - c0, sg * ATTN_PREFILL_SIMDGROUP_ROWS));
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  simdgroup_float8x8 om[ATTN_PREFILL_MAX_HEAD_DIM / 4u];  // columns 8j: om[2j], om[2j + 1]
  for (uint j = 0; j < DV / 4u; ++j) om[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);

  float m = -INFINITY, l = 0.0f;  // the row's adopted maximum (log2 units); this lane's share of Σp
  const uint k_runs = BK * D / 8u / ATTN_PREFILL_THREADS;  // runs of 8 halves of K per thread
  const uint v_runs = DV / 4u * (BK / 8u);                 // runs of 4 dimensions x 8 keys of V
  for (uint k0 = 0; k0 < keys; k0 += BK) {
    // V: 4 dimensions (8 bytes) for 8 keys per run, transposed into 4 runs of the V tile. (V before K:
    // at head dim 256 the other order leaves CUDA's register allocation three registers short.)
    for (uint i = 0; i < (v_runs + ATTN_PREFILL_THREADS - 1u) / ATTN_PREFILL_THREADS; ++i) {
      const uint run = tid + i * ATTN_PREFILL_THREADS, group = run % (DV / 4u), key = 8u * (run / (DV / 4u));
      if (run < v_runs) {  // all 8 loads before any use
        uint2 v[8];  // dimensions 4 group .. +3 of key + e: two halves to a word, the lower dimension low
        for (uint e = 0; e < 8u; ++e) {
          const uint2 f = *(device const uint2*)(v_cache + ulong(min(k0 + key + e, keys - 1u)) * kv_width + kvh * D + dv0 + 4u * group);
          v[e] = f;
        }
        for (uint i = 0; i < 4u; ++i) {  // dimension 4 group + i of the 8 keys, key e in half e of the run
          uint w[8];
          for (uint e = 0; e < 8u; ++e) w[e] = ((i < 2u ? v[e].x : v[e].y) >> (16u * (i % 2u))) & 0xffffu;
          store_words(vt + v_row(group, i) * VLD + key,
                      uint4(w[0] | (w[1] << 16u), w[2] | (w[3] << 16u), w[4] | (w[5] << 16u), w[6] | (w[7] << 16u)));
        }
      }
    }
    // K rows k0 .. k0+BK-1 (clamped to the last key: masked below), 16 bytes per run of 8 halves.
    for (uint i = 0; i < k_runs; ++i) {
      const uint run = tid + i * ATTN_PREFILL_THREADS, key = run / (D / 8u), c = 8u * (run % (D / 8u));
      const uint4 k8 = *(device const uint4*)(k_cache + ulong(min(k0 + key, keys - 1u)) * kv_width + kvh * D + c);
      store_words(kt + key * KLD + c, k8);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Scores of this simdgroup's 16 rows against the BK keys, S = Q·Kᵀ: per 16 columns of the head, the
    // K fragments of 16 keys in one load (K read transposed), two 16x16 by 16x8 products.
    simdgroup_float8x8 s[ATTN_PREFILL_MAX_KEYS / 4u];  // keys 8c: s[2c], s[2c + 1]
    for (uint c = 0; c < BK / 4u; ++c) s[c] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint kk = 0; kk < D / 16u; ++kk)
      for (uint b = 0; b < BK / 16u; ++b) {
        simdgroup_half8x8 k00, k01, k10, k11;  // keys 16b + 8x, columns 16kk + 8y: kxy
        simdgroup_load4(k00, k01, k10, k11, kt, KLD, ulong2(16u * kk, 16u * b), true);
        simdgroup_multiply_accumulate_16x16(s[4u * b], s[4u * b + 1u], qm[4u * kk], qm[4u * kk + 1u], qm[4u * kk + 2u],
                                            qm[4u * kk + 3u], k00, k01, s[4u * b], s[4u * b + 1u]);
        simdgroup_multiply_accumulate_16x16(s[4u * b + 2u], s[4u * b + 3u], qm[4u * kk], qm[4u * kk + 1u], qm[4u * kk + 2u],
                                            qm[4u * kk + 3u], k10, k11, s[4u * b + 2u], s[4u * b + 3u]);
      }
    for (uint c = 0; c < BK / 8u; ++c) {
      simdgroup_store(s[2u * c], sc, SLD, ulong2(8u * c, 0u));
      simdgroup_store(s[2u * c + 1u], sc, SLD, ulong2(8u * c, 8u));
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);

    // Online softmax, 2 lanes per row: causal mask, the tile's row maximum, the lazy maximum, weights.
    float sv[ATTN_PREFILL_MAX_KEYS / 2u];
    float mx = -INFINITY;
    for (uint c = 0; c < per_lane; ++c) {
      const uint col = part * per_lane + c;
      sv[c] = k0 + col < my_len ? sc[row * SLD + col] : -INFINITY;
      mx = max(mx, sv[c]);
    }
    mx = max(mx, simd_shuffle_xor(mx, ushort(1)));
    const bool grow = mx > m + ATTN_PREFILL_RESCALE;
    const float alpha = grow ? exp2(m - mx) : 1.0f;  // 0 when m was −inf
    const bool rescale = simd_any(grow && m != -INFINITY);
    m = grow ? mx : m;
    l *= alpha;
    const float base = m == -INFINITY ? 0.0f : m;  // a row with no key yet: every weight 0
    if (rescale) {  // uniform in the simdgroup: O's rows times alpha, BK columns at a time
      for (uint j0 = 0; j0 < DV / 8u; j0 += BK / 8u) {
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = 0; c < BK / 8u; ++c) {
          simdgroup_store(om[2u * (j0 + c)], sc, SLD, ulong2(8u * c, 0u));
          simdgroup_store(om[2u * (j0 + c) + 1u], sc, SLD, ulong2(8u * c, 8u));
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = 0; c < per_lane; ++c) sc[row * SLD + part * per_lane + c] *= alpha;
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = 0; c < BK / 8u; ++c) {
          simdgroup_load(om[2u * (j0 + c)], sc, SLD, ulong2(8u * c, 0u));
          simdgroup_load(om[2u * (j0 + c) + 1u], sc, SLD, ulong2(8u * c, 8u));
        }
      }
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);  // every score read: the weights overwrite them
    for (uint c0 = 0; c0 < per_lane; c0 += 8u) {
      float w[8];
      for (uint c = 0; c < 8u; ++c) {
        const half h = half(exp2(sv[c0 + c] - base));
        w[c] = float(h);
        l += w[c];
      }
      store_run(pw + row * PLD + part * per_lane + c0, w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]);
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);

    // O += P·V: the weights as 16x16 fragments, per 16 columns of the head the V fragments in one load.
    simdgroup_half8x8 pm[ATTN_PREFILL_MAX_KEYS / 4u];  // keys 16b: pm[4b .. 4b+3]
    for (uint b = 0; b < BK / 16u; ++b)
      simdgroup_load4(pm[4u * b], pm[4u * b + 1u], pm[4u * b + 2u], pm[4u * b + 3u], pw, PLD, ulong2(16u * b, 0u));
    for (uint j = 0; j < DV / 16u; ++j)
      for (uint b = 0; b < BK / 16u; ++b) {
        simdgroup_half8x8 v00, v01, v10, v11;  // keys 16b + 8y, columns 16j + 8x: vxy
        simdgroup_load4(v00, v01, v10, v11, vt, VLD, ulong2(16u * b, 16u * j), true);
        simdgroup_multiply_accumulate_16x16(om[4u * j], om[4u * j + 1u], pm[4u * b], pm[4u * b + 1u], pm[4u * b + 2u],
                                            pm[4u * b + 3u], v00, v01, om[4u * j], om[4u * j + 1u]);
        simdgroup_multiply_accumulate_16x16(om[4u * j + 2u], om[4u * j + 3u], pm[4u * b], pm[4u * b + 1u], pm[4u * b + 2u],
                                            pm[4u * b + 3u], v10, v11, om[4u * j + 2u], om[4u * j + 3u]);
      }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // before the next tile overwrites the K and V tiles
  }

  // Epilogue: O / Σp, times sigmoid(gate) when gated. Each simdgroup stages its accumulator in the K/V
  // tiles' memory, EC = ATTN_PREFILL_OUT_COLUMNS columns at a time (the fragments of a pass picked by a
  // uniform test, as for the queries); lane l then takes columns l, l + 32, ... of each row, so that
  // each store covers a whole 128-byte row segment.
  l += simd_shuffle_xor(l, ushort(1));
  if (part == 0u) sc[row] = 1.0f / l;  // each row's 1/Σp, for the lanes that write it (after the barrier below)
  const uint EC = DV < ATTN_PREFILL_OUT_COLUMNS ? DV : ATTN_PREFILL_OUT_COLUMNS, OLD = EC + 4u;
  threadgroup float* staged = (threadgroup float*)tiles + sg * ATTN_PREFILL_SIMDGROUP_ROWS * OLD;
  for (uint c0 = 0; c0 < DV; c0 += EC) {
    for (uint j = 0; j < DV / 8u; ++j)
      if (8u * j >= c0 && 8u * j < c0 + EC) {
        simdgroup_store(om[2u * j], staged, OLD, ulong2(8u * j - c0, 0u));
        simdgroup_store(om[2u * j + 1u], staged, OLD, ulong2(8u * j - c0, 8u));
      }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = 0; i < ATTN_PREFILL_SIMDGROUP_ROWS * EC / 32u; ++i) {
      const uint r = i / (EC / 32u), c = lane + 32u * (i % (EC / 32u));
      const uint q_row = r0 + sg * ATTN_PREFILL_SIMDGROUP_ROWS + r, at_row = min(q_row, rows - 1u);
      const ulong at = (ulong(at_row / G) * p.heads + kvh * G + at_row % G) * D + dv0 + column_dim(c0 + c);
      const float o = staged[r * OLD + c] * sc[r];
      const float y = p.gated != 0u ? o * sigmoid(gate[at]) : o;
      if (q_row < rows) out[at] = y;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
  }
}

[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_32(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 tile_words[ATTN_PREFILL_TILE_WORDS(32u, 32u, 32u)];
  threadgroup uint4 score_words[ATTN_PREFILL_SCORE_WORDS(32u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, (threadgroup half*)tile_words, (threadgroup float*)score_words,
                         32u, 32u, 32u, group.x, group.y, 0u, tid, sg, lane);
}

[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_64(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 tile_words[ATTN_PREFILL_TILE_WORDS(64u, 64u, 32u)];
  threadgroup uint4 score_words[ATTN_PREFILL_SCORE_WORDS(32u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, (threadgroup half*)tile_words, (threadgroup float*)score_words,
                         64u, 64u, 32u, group.x, group.y, 0u, tid, sg, lane);
}

[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_128(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 tile_words[ATTN_PREFILL_TILE_WORDS(128u, 128u, 32u)];
  threadgroup uint4 score_words[ATTN_PREFILL_SCORE_WORDS(32u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, (threadgroup half*)tile_words, (threadgroup float*)score_words,
                         128u, 128u, 32u, group.x, group.y, 0u, tid, sg, lane);
}

// Head dim 256 (the model's): tiles of 16 keys keep K and V within 21 KB of threadgroup memory.
[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_256(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint2 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 tile_words[ATTN_PREFILL_TILE_WORDS(256u, 256u, 16u)];
  threadgroup uint4 score_words[ATTN_PREFILL_SCORE_WORDS(16u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, (threadgroup half*)tile_words, (threadgroup float*)score_words,
                         256u, 256u, 16u, group.x, group.y, 0u, tid, sg, lane);
}

// Head dim 256 for launches of few threadgroups (short prompts, whose time is the longest threadgroup's
// walk over the keys): each threadgroup computes the half of the output's value dimensions that grid.z
// picks, and the scores itself, so that its accumulator takes half the registers (202 against 255 with
// CUDA: two threadgroups per SM) and a key tile half the PV products.
[[max_total_threads_per_threadgroup(ATTN_PREFILL_THREADS)]] kernel void attention_prefill_256_halves(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device const float* gate [[buffer(3)]], device float* out [[buffer(4)]], constant AttentionPrefillParams& p [[buffer(5)]],
    uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 tile_words[ATTN_PREFILL_TILE_WORDS(256u, 128u, 16u)];
  threadgroup uint4 score_words[ATTN_PREFILL_SCORE_WORDS(16u)];
  attention_prefill_rows(q, k_cache, v_cache, gate, out, p, (threadgroup half*)tile_words, (threadgroup float*)score_words,
                         256u, 128u, 16u, group.x, group.y, 128u * group.z, tid, sg, lane);
}
