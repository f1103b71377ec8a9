// Decode attention at the fp16 precision on the matrix units: split-K over spans of keys as
// attention_partial (attention_split.h; attention_combine merges the spans), each span's QKᵀ and PV as
// m16n8k16 products with the keys, not the query heads, as the 16-row operand:
//   Sᵀ[16 keys, 8 heads] = K[16 keys, D] · Qᵀ[D, 8 heads],  Oᵀ[D, 8 heads] += Vᵀ[D, 16 keys] · Pᵀ[16 keys, 8 heads],
// so that a decode step's 8 query heads per KV head (the model's 16/2) fill the products' 8 columns.
// The fp32 split-K kernels spend a shuffle reduction per (head, key) and read the KV cache at about
// 2 TB/s; here a key costs a share of two products (docs/metal.md, "Decode attention at depth").
//
// A threadgroup of ATTN_HALF_SIMDGROUPS simdgroups walks its span in blocks of ATTN_HALF_KEYS keys:
// all threads copy the block's K and V rows (half in the cache: the KV cache type at this precision,
// 16-byte runs of 8) into the tiles, the next block's rows already loading into registers; simdgroup i takes slice i of the head dimensions for
// both products (its Qᵀ fragments and Oᵀ accumulator stay in registers), the slices' partial scores are
// summed by thread (head, key) for the online softmax. As in attention_prefill the running maximum is
// lazy (log2 units, ATTN_PREFILL_RESCALE), the weights enter PV as half and the accumulator is rescaled
// through threadgroup memory on the blocks that move a maximum.
#include <metal_stdlib>
using namespace metal;
#include "tiles.h"

// K or V tile rows: D halves padded by 8 (16-byte aligned rows, staggered banks).
#define ATTN_HALF_TILE_HALVES(D) (ATTN_HALF_KEYS * ((D) + 8u))
#define ATTN_HALF_SCORE_LD 12u  // floats per row of a slice's partial scores [key][head]
#define ATTN_HALF_WEIGHT_LD 16u  // halves per row of the weights Pᵀ [key][head]
// Dimensions per simdgroup slice: a quarter of D, at least the 16 of a product (head dim 32: two slices).
#define ATTN_HALF_SLICE(D) ((D) / ATTN_HALF_SIMDGROUPS < 16u ? 16u : (D) / ATTN_HALF_SIMDGROUPS)
// Runs of 8 halves of one tile per thread.
#define ATTN_HALF_RUNS(D) ((ATTN_HALF_KEYS * (D) / 8u + ATTN_HALF_THREADS - 1u) / ATTN_HALF_THREADS)

inline void attention_partial_half_span(device const float* q, device const half* k_cache, device const half* v_cache,
                                        device float* part_ml, device float* part_o, device float* out,
                                        device const float* gate, constant AttentionParams& p, threadgroup half* kt,
                                        threadgroup half* vt, threadgroup float* scores, threadgroup half* weights,
                                        threadgroup float* head_scale, const uint D, uint3 group, uint tid, uint sg,
                                        uint lane) {
  const uint KLD = D + 8u, SLD = ATTN_HALF_SCORE_LD, PLD = ATTN_HALF_WEIGHT_LD, B = ATTN_HALF_KEYS;
  const uint SL = ATTN_HALF_SLICE(D), slices = D / SL, KB = SL / 16u, RUNS = ATTN_HALF_RUNS(D);
  const uint s = group.x, kvh = group.y, t = group.z;
  const uint G = p.heads / p.kv_heads, kv_width = p.kv_heads * D;
  const uint tc = p.t0 + t, len = p.pos0 + tc + 1u;
  const uint k0 = s * p.span, k1 = min(k0 + p.span, len);
  const ulong part = (ulong(t) * p.heads + kvh * G) * p.splits + s;  // (t, first head of the group, s)
  if (k0 >= len) {  // the whole span is in this token's future (never so for the first split)
    for (uint i = tid; i < G * D; i += ATTN_HALF_THREADS) part_o[(part + (i / D) * p.splits) * D + i % D] = 0.0f;
    if (tid < G) {
      part_ml[(part + tid * p.splits) * 2u] = -INFINITY;
      part_ml[(part + tid * p.splits) * 2u + 1u] = 0.0f;
    }
    return;
  }
  const bool slicer = sg < slices;  // whether this simdgroup computes a slice (head dim 32: two of four)
  const uint d0 = sg * SL;          // its first dimension

  // Qᵀ: the G query rows (scaled by 1/sqrt(D)·log2(e), rows past G zero) staged in the V tile as [head][D],
  // then this slice's fragments, qf[2b] dimensions d0 + 16b .. +7 and qf[2b + 1] the next 8.
  const float scale = p.scale * 1.4426950408889634f;
  for (uint i = 0; i < (ATTN_HALF_GROUP * D / 8u + ATTN_HALF_THREADS - 1u) / ATTN_HALF_THREADS; ++i) {
    const uint run = tid + i * ATTN_HALF_THREADS, g = run / (D / 8u), c = 8u * (run % (D / 8u));
    if (run < ATTN_HALF_GROUP * D / 8u) {
      device const float* src = q + (ulong(tc) * p.heads + kvh * G + min(g, G - 1u)) * D + c;
      const float f = g < G ? scale : 0.0f;
      store_run(vt + g * KLD + c, src[0] * f, src[1] * f, src[2] * f, src[3] * f, src[4] * f, src[5] * f, src[6] * f,
                src[7] * f);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 qf[ATTN_HALF_MAX_SLICE / 8u];
  simdgroup_float8x8 of[ATTN_HALF_MAX_SLICE / 8u];  // Oᵀ: of[2b] dimensions d0 + 16b .. +7, of[2b + 1] the next 8
  for (uint b = 0; b < KB; ++b) {
    simdgroup_load(qf[2u * b], vt, KLD, ulong2(d0 + 16u * b, 0u), true);
    simdgroup_load(qf[2u * b + 1u], vt, KLD, ulong2(d0 + 16u * b + 8u, 0u), true);
    of[2u * b] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    of[2u * b + 1u] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }

  // This thread's runs of a block: run r is key r / (D / 8), dimensions 8 (r % (D / 8)) .. +7, 16 bytes
  // of K and 16 of V each (keys past the span clamped to its last: their scores are masked).
  uint4 kr[ATTN_HALF_RUNS(ATTN_HALF_MAX_HEAD_DIM)], vr[ATTN_HALF_RUNS(ATTN_HALF_MAX_HEAD_DIM)];
  device const half* kh = k_cache + kvh * D;
  device const half* vh = v_cache + kvh * D;
  for (uint i = 0; i < RUNS; ++i) {
    const uint run = min(tid + i * ATTN_HALF_THREADS, B * D / 8u - 1u), c = 8u * (run % (D / 8u));
    const ulong at = ulong(min(k0 + run / (D / 8u), k1 - 1u)) * kv_width + c;
    const uint4 k8 = *(device const uint4*)(kh + at), v8 = *(device const uint4*)(vh + at);
    kr[i] = k8;
    vr[i] = v8;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // every fragment of Qᵀ read: the tiles take the blocks

  // The softmax thread: head h (rows past G: weight 0), key b; 16 lanes per head.
  const uint h = tid / B, b = tid % B;
  float m = -INFINITY, l = 0.0f;  // head h's adopted maximum (log2 units); this thread's share of Σp
  for (uint j0 = k0; j0 < k1; j0 += B) {
    for (uint i = 0; i < RUNS; ++i) {
      const uint run = tid + i * ATTN_HALF_THREADS, key = run / (D / 8u), c = 8u * (run % (D / 8u));
      if (run < B * D / 8u) {
        store_words(kt + key * KLD + c, kr[i]);
        store_words(vt + key * KLD + c, vr[i]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (j0 + B < k1)  // the next block, in flight during this one's products
      for (uint i = 0; i < RUNS; ++i) {
        const uint run = min(tid + i * ATTN_HALF_THREADS, B * D / 8u - 1u), c = 8u * (run % (D / 8u));
        const ulong at = ulong(min(j0 + B + run / (D / 8u), k1 - 1u)) * kv_width + c;
        const uint4 k8 = *(device const uint4*)(kh + at), v8 = *(device const uint4*)(vh + at);
        kr[i] = k8;
        vr[i] = v8;
      }

    // This slice's share of the scores: Sᵀ = K·Qᵀ over its dimensions (K fragments of 16 keys by 16
    // dimensions in one load), keys 0-7 in s0 and 8-15 in s1.
    if (slicer) {
      simdgroup_float8x8 s0 = make_filled_simdgroup_matrix<float, 8, 8>(0.0f), s1 = s0;
      for (uint kb = 0; kb < KB; ++kb) {
        simdgroup_half8x8 k00, k10, k01, k11;  // keys 8x .. +7, dimensions d0 + 16kb + 8y .. +7: kxy
        simdgroup_load4(k00, k10, k01, k11, kt, KLD, ulong2(d0 + 16u * kb, 0u));
        simdgroup_multiply_accumulate_16x16(s0, s1, k00, k10, k01, k11, qf[2u * kb], qf[2u * kb + 1u], s0, s1);
      }
      simdgroup_store(s0, scores + sg * B * SLD, SLD, ulong2(0u, 0u));
      simdgroup_store(s1, scores + sg * B * SLD, SLD, ulong2(0u, 8u));
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // Online softmax of thread (h, b): the slices' sum, the mask, the block's maximum over the 16 lanes
    // of head h, the lazy maximum, the weight as half (its rounded value is what Σp adds).
    float sc = 0.0f;
    for (uint i = 0; i < slices; ++i) sc += scores[(i * B + b) * SLD + h];
    sc = j0 + b < k1 && h < G ? sc : -INFINITY;
    float bm = sc;
    for (ushort o = 8; o > 0; o /= 2) bm = max(bm, simd_shuffle_xor(bm, o));
    const bool grow = bm > m + ATTN_PREFILL_RESCALE;  // never for rows past G (bm = −∞)
    const float alpha = grow && m != -INFINITY ? exp2(m - bm) : 1.0f;
    m = grow ? bm : m;
    const float w = float(half(exp2(sc - (m == -INFINITY ? 0.0f : m))));
    l = l * alpha + w;
    const float w_odd = simd_shuffle_down(w, ushort(B));  // head h + 1's weight of key b (lanes 16-31)
    if (lane < B) ((threadgroup uint*)weights)[(b * PLD + h) / 2u] = half2_bits(w, w_odd);
    if (b == 0u) head_scale[h] = alpha;
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // A block that moved a maximum (uniform: every thread reads the same head_scale): Oᵀ's columns
    // times their heads' factors, through this slice's share of the K tile (read: the scores are taken).
    bool rescale = false;
    for (uint g = 0; g < ATTN_HALF_GROUP; ++g) rescale = rescale || head_scale[g] != 1.0f;
    if (slicer) {
      if (rescale) {
        threadgroup float* staged = (threadgroup float*)kt + d0 * ATTN_HALF_GROUP;  // [SL][8]
        for (uint i = 0; i < 2u * KB; ++i) simdgroup_store(of[i], staged, ATTN_HALF_GROUP, ulong2(0u, 8u * i));
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint e = lane; e < SL * ATTN_HALF_GROUP; e += 32u) staged[e] *= head_scale[e % ATTN_HALF_GROUP];
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = 0; i < 2u * KB; ++i) simdgroup_load(of[i], staged, ATTN_HALF_GROUP, ulong2(0u, 8u * i));
      }
      // Oᵀ += Vᵀ·Pᵀ over this slice's dimensions: Vᵀ fragments of 16 dimensions by 16 keys in one load
      // (the V tile read transposed), Pᵀ keys 0-7 in p0 and 8-15 in p1.
      simdgroup_half8x8 p0, p1;
      simdgroup_load(p0, weights, PLD, ulong2(0u, 0u));
      simdgroup_load(p1, weights, PLD, ulong2(0u, 8u));
      for (uint kb = 0; kb < KB; ++kb) {
        simdgroup_half8x8 v00, v10, v01, v11;  // dimensions d0 + 16kb + 8x .. +7, keys 8y .. +7: vxy
        simdgroup_load4(v00, v10, v01, v11, vt, KLD, ulong2(d0 + 16u * kb, 0u), true);
        simdgroup_multiply_accumulate_16x16(of[2u * kb], of[2u * kb + 1u], v00, v10, v01, v11, p0, p1, of[2u * kb],
                                            of[2u * kb + 1u]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // before the next block overwrites the tiles
  }

  // Epilogue: Oᵀ staged as [D][8] in the K tile, each head's Σp (16 lanes) and maximum beside the scores;
  // then thread i writes dimension i % D of head i / D: the output (one span), or the span's partial
  // (maximum in natural-log units, as attention_partial's).
  for (ushort o = 8; o > 0; o /= 2) l += simd_shuffle_xor(l, o);
  threadgroup float* staged = (threadgroup float*)kt;
  if (slicer)
    for (uint i = 0; i < 2u * KB; ++i) simdgroup_store(of[i], staged, ATTN_HALF_GROUP, ulong2(0u, d0 + 8u * i));
  if (b == 0u) {
    scores[2u * h] = m * 0.6931471805599453f;
    scores[2u * h + 1u] = l;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = tid; i < G * D; i += ATTN_HALF_THREADS) {
    const uint g = i / D, dd = i % D;
    const float o = staged[dd * ATTN_HALF_GROUP + g];
    if (p.splits == 1u) {
      const ulong at = (ulong(tc) * p.heads + kvh * G + g) * D + dd;
      const float y = o / scores[2u * g + 1u];
      out[at] = p.gated != 0u ? y * sigmoid(gate[at]) : y;
    } else {
      part_o[(part + g * p.splits) * D + dd] = o;
      if (dd == 0u) {
        part_ml[(part + g * p.splits) * 2u] = scores[2u * g];
        part_ml[(part + g * p.splits) * 2u + 1u] = scores[2u * g + 1u];
      }
    }
  }
}

[[max_total_threads_per_threadgroup(ATTN_HALF_THREADS)]] kernel void attention_partial_half_32(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device float* part_ml [[buffer(3)]], device float* part_o [[buffer(4)]], device float* out [[buffer(5)]],
    device const float* gate [[buffer(6)]], constant AttentionParams& p [[buffer(7)]],
    uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 k_words[ATTN_HALF_TILE_HALVES(32u) / 8u];
  threadgroup uint4 v_words[ATTN_HALF_TILE_HALVES(32u) / 8u];
  threadgroup float scores[ATTN_HALF_SIMDGROUPS * ATTN_HALF_KEYS * ATTN_HALF_SCORE_LD];
  threadgroup uint4 weight_words[ATTN_HALF_KEYS * ATTN_HALF_WEIGHT_LD / 8u];
  threadgroup float head_scale[ATTN_HALF_GROUP];
  attention_partial_half_span(q, k_cache, v_cache, part_ml, part_o, out, gate, p, (threadgroup half*)k_words,
                              (threadgroup half*)v_words, scores, (threadgroup half*)weight_words, head_scale, 32u, group,
                              tid, sg, lane);
}

[[max_total_threads_per_threadgroup(ATTN_HALF_THREADS)]] kernel void attention_partial_half_64(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device float* part_ml [[buffer(3)]], device float* part_o [[buffer(4)]], device float* out [[buffer(5)]],
    device const float* gate [[buffer(6)]], constant AttentionParams& p [[buffer(7)]],
    uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 k_words[ATTN_HALF_TILE_HALVES(64u) / 8u];
  threadgroup uint4 v_words[ATTN_HALF_TILE_HALVES(64u) / 8u];
  threadgroup float scores[ATTN_HALF_SIMDGROUPS * ATTN_HALF_KEYS * ATTN_HALF_SCORE_LD];
  threadgroup uint4 weight_words[ATTN_HALF_KEYS * ATTN_HALF_WEIGHT_LD / 8u];
  threadgroup float head_scale[ATTN_HALF_GROUP];
  attention_partial_half_span(q, k_cache, v_cache, part_ml, part_o, out, gate, p, (threadgroup half*)k_words,
                              (threadgroup half*)v_words, scores, (threadgroup half*)weight_words, head_scale, 64u, group,
                              tid, sg, lane);
}

[[max_total_threads_per_threadgroup(ATTN_HALF_THREADS)]] kernel void attention_partial_half_128(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device float* part_ml [[buffer(3)]], device float* part_o [[buffer(4)]], device float* out [[buffer(5)]],
    device const float* gate [[buffer(6)]], constant AttentionParams& p [[buffer(7)]],
    uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 k_words[ATTN_HALF_TILE_HALVES(128u) / 8u];
  threadgroup uint4 v_words[ATTN_HALF_TILE_HALVES(128u) / 8u];
  threadgroup float scores[ATTN_HALF_SIMDGROUPS * ATTN_HALF_KEYS * ATTN_HALF_SCORE_LD];
  threadgroup uint4 weight_words[ATTN_HALF_KEYS * ATTN_HALF_WEIGHT_LD / 8u];
  threadgroup float head_scale[ATTN_HALF_GROUP];
  attention_partial_half_span(q, k_cache, v_cache, part_ml, part_o, out, gate, p, (threadgroup half*)k_words,
                              (threadgroup half*)v_words, scores, (threadgroup half*)weight_words, head_scale, 128u, group,
                              tid, sg, lane);
}

[[max_total_threads_per_threadgroup(ATTN_HALF_THREADS)]] kernel void attention_partial_half_256(
    device const float* q [[buffer(0)]], device const half* k_cache [[buffer(1)]], device const half* v_cache [[buffer(2)]],
    device float* part_ml [[buffer(3)]], device float* part_o [[buffer(4)]], device float* out [[buffer(5)]],
    device const float* gate [[buffer(6)]], constant AttentionParams& p [[buffer(7)]],
    uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 k_words[ATTN_HALF_TILE_HALVES(256u) / 8u];
  threadgroup uint4 v_words[ATTN_HALF_TILE_HALVES(256u) / 8u];
  threadgroup float scores[ATTN_HALF_SIMDGROUPS * ATTN_HALF_KEYS * ATTN_HALF_SCORE_LD];
  threadgroup uint4 weight_words[ATTN_HALF_KEYS * ATTN_HALF_WEIGHT_LD / 8u];
  threadgroup float head_scale[ATTN_HALF_GROUP];
  attention_partial_half_span(q, k_cache, v_cache, part_ml, part_o, out, gate, p, (threadgroup half*)k_words,
                              (threadgroup half*)v_words, scores, (threadgroup half*)weight_words, head_scale, 256u, group,
                              tid, sg, lane);
}
