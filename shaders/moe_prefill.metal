// Mixture of experts for prefill chunks (n >= PREFILL_MIN_TOKENS tokens): the chunk's (token, slot)
// entries bucketed by expert on the device, then grouped GEMMs over the buckets on simdgroup matrices
// (fp16 operands, fp32 accumulation), so that each expert's weights are read once per chunk, and a
// combine in slot order. The shared expert is one more bucket, index p.experts, holding every token.
// Nothing is read back by the host: the buckets' tiles are listed on the device (moe_tile_list or
// moe_bucket_small), and the expert kernels' launches cover the most tiles any routing can give; those
// past the list exit at once.
#include <metal_stdlib>
using namespace metal;
#include "tiles.h"

// Counting sort of the n·k entries (entry t·k + s: token t's slot s) by expert, in three launches:
// moe_bucket_count counts each block of MOE_BUCKET_BLOCK entries per expert and ranks every entry among
// the earlier entries of its expert in the block; moe_bucket_scan turns the counts, laid out [expert,
// block], into each (expert, block)'s first position by one exclusive scan; moe_bucket_scatter places
// every entry at that position plus its rank. Within a bucket, entries are in entry order ((token,
// slot) order), deterministically. offsets[e] .. offsets[e+1] is expert e's bucket in `entries`;
// positions[entry] is the entry's place there. Ids outside 0 .. experts-1 are in no bucket. Short
// chunks run it, and moe_tile_list, as the one launch of moe_bucket_small.
inline uint bucket_blocks(constant MoeTiledParams& p) { return (p.n * p.k + MOE_BUCKET_BLOCK - 1u) / MOE_BUCKET_BLOCK; }

// The exclusive prefix sum of `value` over the threadgroup's threads in index order, and their sum in
// `total`: simdgroup prefix sums, then one over the simdgroups' totals (one word each in
// simdgroup_totals, rewritable once it returns). Every thread of the `simdgroups` (at most 32) calls it.
inline uint threadgroup_exclusive_sum(uint value, threadgroup uint* simdgroup_totals, uint simdgroups, uint sg,
                                      uint lane, thread uint& total) {
  const uint before_in_simdgroup = simd_prefix_exclusive_sum(value);
  if (lane == 31u) simdgroup_totals[sg] = before_in_simdgroup + value;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const uint sums = lane < simdgroups ? simdgroup_totals[lane] : 0u;
  const uint simdgroups_before = simd_prefix_exclusive_sum(sums);
  total = simd_sum(sums);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return simd_shuffle(simdgroups_before, ushort(sg)) + before_in_simdgroup;
}

// Threadgroup = one block of entries; thread (part, e) = tid / lanes, tid % lanes (lanes = experts
// rounded up to 32; the host picks parts, a power of 2 up to MOE_BUCKET_PARTS) walks part `part` of the
// block in entry order and ranks expert e's entries there, so ranks are stable; an entry's rank in the
// block adds its expert's counts in the earlier parts. counts[e · blocks + block] = the block's entries
// of expert e; positions[entry] = the entry's rank (scattered later).
[[max_total_threads_per_threadgroup(MOE_BUCKET_THREADS)]] kernel void moe_bucket_count(device const int* ids [[buffer(0)]], device uint* counts [[buffer(1)]],
                             device uint* positions [[buffer(2)]], constant MoeTiledParams& p [[buffer(3)]],
                             uint block [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                             uint threads [[threads_per_threadgroup]]) {
  threadgroup uint4 expert_of[MOE_BUCKET_BLOCK / 4u];
  threadgroup uint rank_of[MOE_BUCKET_BLOCK];
  threadgroup uint part_count[MOE_BUCKET_THREADS];  // [part][lane]
  threadgroup uint* expert_words = (threadgroup uint*)expert_of;
  const uint entry_count = p.n * p.k, first = block * MOE_BUCKET_BLOCK;
  const uint lanes = (p.experts + 31u) / 32u * 32u, e = tid % lanes, part = tid / lanes;
  const uint span = MOE_BUCKET_BLOCK / (threads / lanes);  // entries per part, a multiple of 4
  for (uint j = tid; j < MOE_BUCKET_BLOCK; j += threads) {
    const uint i = first + j, id = uint(ids[min(i, entry_count - 1u)]);
    expert_words[j] = i < entry_count && id < p.experts ? id : 0xffffffffu;  // matches no thread
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint count = 0u;
  for (uint j4 = part * span / 4u; j4 < (part + 1u) * span / 4u; ++j4) {
    const uint4 v = expert_of[j4];  // 4 entries per load
    const uint x[4] = {v.x, v.y, v.z, v.w};
    for (uint c = 0; c < 4u; ++c)
      if (x[c] == e) rank_of[4u * j4 + c] = count++;
  }
  part_count[tid] = count;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (part == 0u && e < p.experts) {
    uint total = 0u;
    for (uint q = 0; q < threads / lanes; ++q) total += part_count[q * lanes + e];
    counts[e * bucket_blocks(p) + block] = total;
  }
  for (uint j = tid; j < MOE_BUCKET_BLOCK; j += threads) {
    const uint x = expert_words[j];
    if (x == 0xffffffffu) continue;
    uint rank = rank_of[j];
    for (uint q = 0; q < j / span; ++q) rank += part_count[q * lanes + x];
    positions[first + j] = rank;
  }
}

// One threadgroup: counts [experts · blocks] become their exclusive prefix sums, in rounds of
// MOE_SCAN_THREADS · MOE_SCAN_PER_THREAD consecutive counts (each thread a run of MOE_SCAN_PER_THREAD,
// the runs' sums scanned by threadgroup_exclusive_sum), the rounds chained by a carry. offsets[e] is
// expert e's block 0; offsets[experts] the number of entries in buckets.
[[max_total_threads_per_threadgroup(MOE_SCAN_THREADS)]] kernel void moe_bucket_scan(device uint* counts [[buffer(0)]], device uint* offsets [[buffer(1)]],
                            constant MoeTiledParams& p [[buffer(2)]], uint tid [[thread_index_in_threadgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint simdgroup_totals[MOE_SCAN_THREADS / 32];
  const uint blocks = bucket_blocks(p), size = p.experts * blocks;
  uint carry = 0u;
  for (uint r0 = 0; r0 < size; r0 += uint(MOE_SCAN_THREADS) * MOE_SCAN_PER_THREAD) {
    const uint first = r0 + MOE_SCAN_PER_THREAD * tid;
    uint v[MOE_SCAN_PER_THREAD];
    for (uint u = 0; u < MOE_SCAN_PER_THREAD; ++u) v[u] = counts[min(first + u, size - 1u)];
    uint run = 0u, round_total;
    for (uint u = 0; u < MOE_SCAN_PER_THREAD; ++u) run += first + u < size ? v[u] : 0u;
    uint at = carry + threadgroup_exclusive_sum(run, simdgroup_totals, MOE_SCAN_THREADS / 32u, sg, lane, round_total);
    for (uint u = 0; u < MOE_SCAN_PER_THREAD; ++u) {
      const uint i = first + u;
      if (i < size) {
        counts[i] = at;
        if (i % blocks == 0u) offsets[i / blocks] = at;
      }
      at += first + u < size ? v[u] : 0u;
    }
    carry += round_total;
  }
  if (tid == 0u) offsets[p.experts] = carry;
}

// One thread per entry: its position = its (expert, block)'s first position + its rank.
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void moe_bucket_scatter(device const int* ids [[buffer(0)]], device const uint* counts [[buffer(1)]],
                               device uint* entries [[buffer(2)]], device uint* positions [[buffer(3)]],
                               constant MoeTiledParams& p [[buffer(4)]], uint i [[thread_position_in_grid]]) {
  const uint entry_count = p.n * p.k, ic = min(i, entry_count - 1u);
  const uint e = uint(ids[ic]), rank = positions[ic];
  const uint first = counts[min(e, p.experts - 1u) * bucket_blocks(p) + ic / MOE_BUCKET_BLOCK];
  if (i < entry_count && e < p.experts) {
    positions[i] = first + rank;
    entries[first + rank] = i;
  }
}

// The tiles of the buckets for the expert kernels, numbered: tile s is tile i (rows p.tile_tokens·i ..)
// of bucket e, tiles[1 + s] = e << 16 | i, in bucket order (the shared expert's, ceil(n / tile_tokens),
// last), with MOE_HALF_TILE set on a bucket's last tile when it holds at most tile_tokens / 2 rows (the
// `_q4` builds run such a tile on half the rows: a bucket of 512 tokens x 8 / 256 experts = 16 entries
// on average fills half a `_short` tile); tiles[0] is their number. The expert kernels' launches cover
// the most tiles any routing can give (ceil(n·k / tile_tokens) + buckets), and their threadgroups past
// tiles[0] exit at once: far fewer than one per (largest possible bucket, expert). Thread j takes
// buckets MOE_TILE_LIST_PER_THREAD·j ..; their first tiles by threadgroup_exclusive_sum. All threads
// of the threadgroup (`simdgroups` simdgroups) call it; offsets, in device or threadgroup memory, as
// moe_bucket_scan writes them.
template <typename Offsets>
inline void list_tiles(Offsets offsets, device uint* tiles, constant MoeTiledParams& p,
                       threadgroup uint* simdgroup_totals, uint simdgroups, uint tid, uint sg, uint lane) {
  const uint buckets = p.experts + p.shared, T = p.tile_tokens;
  uint count[MOE_TILE_LIST_PER_THREAD], half_last[MOE_TILE_LIST_PER_THREAD], mine = 0u;
  for (uint u = 0; u < MOE_TILE_LIST_PER_THREAD; ++u) {
    const uint e = MOE_TILE_LIST_PER_THREAD * tid + u, ec = min(e, p.experts - 1u);
    const uint rows = e == p.experts ? p.n : offsets[ec + 1u] - offsets[ec];
    count[u] = e < buckets ? (rows + T - 1u) / T : 0u;
    half_last[u] = count[u] > 0u && rows - T * (count[u] - 1u) <= T / 2u ? MOE_HALF_TILE : 0u;
    mine += count[u];
  }
  uint all;
  uint at = threadgroup_exclusive_sum(mine, simdgroup_totals, simdgroups, sg, lane, all);
  if (tid == 0u) tiles[0] = all;
  for (uint u = 0; u < MOE_TILE_LIST_PER_THREAD; ++u) {
    const uint e = MOE_TILE_LIST_PER_THREAD * tid + u;
    for (uint i = 0; i < count[u]; ++i) tiles[1u + at + i] = (e << 16u) | i | (i + 1u == count[u] ? half_last[u] : 0u);
    at += count[u];
  }
}

[[max_total_threads_per_threadgroup(MOE_TILE_LIST_THREADS)]] kernel void moe_tile_list(device const uint* offsets [[buffer(0)]], device uint* tiles [[buffer(1)]],
                          constant MoeTiledParams& p [[buffer(2)]], uint tid [[thread_index_in_threadgroup]],
                          uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint simdgroup_totals[MOE_TILE_LIST_THREADS / 32];
  list_tiles(offsets, tiles, p, simdgroup_totals, MOE_TILE_LIST_THREADS / 32u, tid, sg, lane);
}

// The number of bits set in v (Metal's popcount is not in the portable subset).
inline uint bits_set(uint v) {
  v -= (v >> 1u) & 0x55555555u;
  v = (v & 0x33333333u) + ((v >> 2u) & 0x33333333u);
  return (((v + (v >> 4u)) & 0x0f0f0f0fu) * 0x01010101u) >> 24u;
}

// A chunk of at most MOE_BUCKET_SMALL_ENTRIES entries and MOE_BUCKET_SMALL_EXPERTS experts: what
// moe_bucket_count, _scan, _scatter and moe_tile_list write (offsets, positions, entries, tiles), in one
// launch of one threadgroup, so that a short prompt pays one launch's latency per layer instead of four.
// Simdgroup sg takes entries 32·(R·sg + r) + lane in rounds r < R = MOE_BUCKET_SMALL_ENTRIES /
// MOE_BUCKET_SMALL_THREADS. In a round, each lane finds the lanes holding its expert by 32 shuffles
// (its rank: those below it), and the lowest of them adds their number to the simdgroup's count of
// the expert, so the count read before is the rank's base: ranks in entry order without atomics. The
// counts, [expert][simdgroup], then become their exclusive prefix sums (each thread one expert's 8
// simdgroups), each cell's first position; an entry's position is its cell's plus its rank.
[[max_total_threads_per_threadgroup(MOE_BUCKET_SMALL_THREADS)]] kernel void moe_bucket_small(device const int* ids [[buffer(0)]], device uint* offsets [[buffer(1)]],
                             device uint* entries [[buffer(2)]], device uint* positions [[buffer(3)]],
                             device uint* tiles [[buffer(4)]], constant MoeTiledParams& p [[buffer(5)]],
                             uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 cell_words[MOE_BUCKET_SMALL_EXPERTS * 32u / 8u];  // ushort [expert][simdgroup]
  threadgroup uint bucket_offsets[MOE_BUCKET_SMALL_EXPERTS + 1u];
  threadgroup uint simdgroup_totals[MOE_BUCKET_SMALL_THREADS / 32];
  threadgroup uint* cell_pairs = (threadgroup uint*)cell_words;
  threadgroup ushort* cells = (threadgroup ushort*)cell_words;
  constexpr uint rounds = MOE_BUCKET_SMALL_ENTRIES / MOE_BUCKET_SMALL_THREADS;
  const uint entry_count = p.n * p.k, none = 0xffffffffu;
  for (uint j = tid; j < MOE_BUCKET_SMALL_EXPERTS * 32u / 2u; j += MOE_BUCKET_SMALL_THREADS)
    cell_pairs[j] = 0u;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint expert[rounds], rank[rounds];
  for (uint r = 0; r < rounds; ++r) {
    const uint first = 32u * (rounds * sg + r), i = first + lane, id = uint(ids[min(i, entry_count - 1u)]);
    expert[r] = i < entry_count && id < p.experts ? id : none;  // in no bucket
    rank[r] = 0u;
    if (first >= entry_count) continue;  // the whole simdgroup
    uint same = 0u;  // the lanes holding this lane's expert
    for (ushort l = 0; l < 32u; ++l) same |= simd_shuffle(expert[r], l) == expert[r] ? 1u << l : 0u;
    const uint below = bits_set(same & ((1u << lane) - 1u)), cell = min(expert[r], p.experts - 1u) * 32u + sg;
    const uint before = cells[cell];
    simdgroup_barrier(mem_flags::mem_threadgroup);  // every lane has read its count before it changes
    if (expert[r] != none && below == 0u) cells[cell] = ushort(before + bits_set(same));
    simdgroup_barrier(mem_flags::mem_threadgroup);
    rank[r] = before + below;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // Thread tid: expert tid / 4's cells of simdgroups 8·(tid % 4) .., one uint4 of them (zero past the
  // experts).
  const uint e = tid / 4u;
  const uint4 w = cell_words[tid];
  const uint words[4] = {w.x, w.y, w.z, w.w};
  uint run = 0u, total;
  for (uint u = 0; u < 4u; ++u) run += (words[u] & 0xffffu) + (words[u] >> 16u);
  uint at = threadgroup_exclusive_sum(run, simdgroup_totals, MOE_BUCKET_SMALL_THREADS / 32u, sg, lane, total);
  if (e < p.experts && tid % 4u == 0u) offsets[e] = bucket_offsets[e] = at;
  if (tid == 0u) offsets[p.experts] = bucket_offsets[p.experts] = total;
  for (uint u = 0; u < 4u; ++u) {  // first positions, at most MOE_BUCKET_SMALL_ENTRIES: 16 bits each
    cell_pairs[4u * tid + u] = at | (at + (words[u] & 0xffffu)) << 16u;
    at += (words[u] & 0xffffu) + (words[u] >> 16u);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint r = 0; r < rounds; ++r) {
    const uint i = 32u * (rounds * sg + r) + lane;
    if (expert[r] == none) continue;
    const uint position = cells[expert[r] * 32u + sg] + rank[r];
    positions[i] = position;
    entries[position] = i;
  }
  list_tiles(bucket_offsets, tiles, p, simdgroup_totals, MOE_BUCKET_SMALL_THREADS / 32u, tid, sg, lane);
}

// The rows of bucket e that tile row r stands for (rows past the bucket repeat its last row; what they
// produce is never stored), as an index into a row-major source, plus whether the tile is empty.
struct Bucket {
  uint begin;  // first position of the bucket in `entries` (0 for the shared expert)
  uint count;  // rows
  bool shared;
};

// Whether a build keeps the scale words that consecutive K-steps share (fetch_scale_words) instead of
// reading them again: all but the affine build of GEMM_TILE_TOKENS rows, which holding them takes from
// 128 to about 160 registers with CUDA (3 threadgroups per SM instead of 4: slower than the reads).
inline bool keeps_scale_words(uint tokens, bool dense) { return dense || tokens != GEMM_TILE_TOKENS; }

// A tile's number within its bucket, and whether moe_tile_list marked it half (MOE_HALF_TILE).
inline uint tile_in_bucket(uint tile) { return tile & (MOE_HALF_TILE - 1u); }
inline bool is_half_tile(device const uint* tiles, uint s) { return s < tiles[0] && (tiles[1u + s] & MOE_HALF_TILE) != 0u; }

inline Bucket bucket_of(device const uint* offsets, uint e, uint experts, uint n) {
  const uint ec = min(e, experts - 1u);
  const uint begin = offsets[ec], end = offsets[ec + 1u];
  Bucket b;
  b.shared = e == experts;
  b.begin = b.shared ? 0u : begin;
  b.count = b.shared ? n : end - begin;
  return b;
}

// h[position, i] = silu(gate_e[i] · x[token]) * (up_e[i] · x[token]) for the entries of expert e's
// bucket in bucket order (the shared expert: sh[t, i] for every token t). Threadgroup (row tile of i,
// tile s of moe_tile_list's); gate and up tiles share the activation tile, SwiGLU in the epilogue.
// x is half rows (half_rows); h and sh are written as half rows too (HALF_ROW_LD of the gate's rows,
// zero past them), the form moe_down_tiled reads: rounded once here, as its tiles would. The tiled
// kernels come in two builds: for every stored format, and `_affine` for MLX affine 4- and 8-bit weights
// only (`dense` false: without the bf16/f16/f32 paths they hold fewer registers, so more threadgroups
// fit an SM, which is what hides their loads' latency; GpuBackend picks it when every matrix is affine),
// whose `_short` build takes tiles of MOE_SHORT_TILE_TOKENS bucket rows instead of GEMM_TILE_TOKENS
// (for chunks whose buckets are that short on average: half the accumulators, so more threadgroups
// again). A tile of `tokens` rows is 2x2 simdgroups of tokens/2 rows x 32 columns.
inline void moe_gate_up_tile(
    device const uchar* gw, device const uchar* gs, device const uchar* gb, device const uchar* uw,
    device const uchar* us, device const uchar* ub, device const uchar* sgw, device const uchar* sgs,
    device const uchar* sgb, device const uchar* suw, device const uchar* sus, device const uchar* sub,
    device const uint4* x, device const uint* offsets, device const uint* entries, device ushort* h,
    device ushort* sh, constant MoeTiledParams& p, uint3 group, uint tid, uint sg, uint lane,
    device const uint* tiles, threadgroup uint4* tile_words, threadgroup uint* row_of, uint tokens, bool dense) {
  if (group.y >= tiles[0]) return;  // the whole threadgroup: past the buckets' tiles
  const uint tile = tiles[1u + group.y], e = tile >> 16u, ec = min(e, p.experts - 1u);
  const Bucket b = bucket_of(offsets, e, p.experts, p.n);
  const uint t0 = tokens * tile_in_bucket(tile), i0 = GEMM_TILE_ROWS * group.x, half_tokens = tokens / 2u;
  const WeightDesc gd = pick_expert_weight(p.gate, p.sgate, b.shared);
  const WeightDesc ud = pick_expert_weight(p.up, p.sup, b.shared);
  if (t0 >= b.count || i0 >= gd.rows) return;  // the whole threadgroup: past the bucket or the rows

  threadgroup half* xt = (threadgroup half*)tile_words;
  threadgroup half* gt = xt + GEMM_TILE_TOKENS * TILE_LD(GEMM_K);
  threadgroup half* ut = gt + GEMM_TILE_ROWS * TILE_LD(GEMM_K);
  device const uchar* gdata = b.shared ? sgw : gw + expert_bytes(p.gate, ec);
  device const uchar* gscales = b.shared ? sgs : gs + expert_scale_bytes(p.gate, ec);
  device const uchar* gbiases = b.shared ? sgb : gb + expert_scale_bytes(p.gate, ec);
  device const uchar* udata = b.shared ? suw : uw + expert_bytes(p.up, ec);
  device const uchar* uscales = b.shared ? sus : us + expert_scale_bytes(p.up, ec);
  device const uchar* ubiases = b.shared ? sub : ub + expert_scale_bytes(p.up, ec);
  if (tid < tokens) {
    const uint r = min(t0 + tid, b.count - 1u);
    row_of[tid] = b.shared ? r : entries[b.begin + r] / p.k;  // the entry's token
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint m = sg / 2u, c = sg % 2u;
  const bool keep = keeps_scale_words(tokens, dense);
  simdgroup_float8x8 acc_g[16], acc_u[16];
  for (uint i = 0; i < 16u; ++i) {
    acc_g[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    acc_u[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
  const uint ld = HALF_ROW_LD(p.hidden);
  const uint runs = tokens * GEMM_K / 8u / uint(GEMM_THREADS);
  const ActivationRows xrows = activation_rows(ld, row_of, GEMM_K, runs, tid, GEMM_THREADS);
  ActivationRuns xr = fetch_activations(x, ld, xrows, 0u, GEMM_K, runs);
  WeightRuns gr = fetch_weights(gd, gdata, gscales, gbiases, i0, gd.rows, 0u, GEMM_K, tid, dense, no_weight_runs(),
                                false);
  WeightRuns ur = fetch_weights(ud, udata, uscales, ubiases, i0, ud.rows, 0u, GEMM_K, tid, dense, no_weight_runs(),
                                false);
  for (uint k0 = 0; k0 < p.hidden; k0 += GEMM_K) {
    store_activations(xr, xt, GEMM_K, runs, tid, GEMM_THREADS);
    store_weights(gr, gd, gdata, gscales, gbiases, i0, gd.rows, k0, GEMM_K, gt, tid, dense);
    store_weights(ur, ud, udata, uscales, ubiases, i0, ud.rows, k0, GEMM_K, ut, tid, dense);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads, in flight during the products.
    xr = fetch_activations(x, ld, xrows, k0 + GEMM_K, GEMM_K, runs);
    gr = fetch_weights(gd, gdata, gscales, gbiases, i0, gd.rows, k0 + GEMM_K, GEMM_K, tid, dense, gr, keep);
    ur = fetch_weights(ud, udata, uscales, ubiases, i0, ud.rows, k0 + GEMM_K, GEMM_K, tid, dense, ur, keep);
    tile_products(xt, gt, GEMM_K, half_tokens * m, 32u * c, tokens / 16u, acc_g);
    tile_products(xt, ut, GEMM_K, half_tokens * m, 32u * c, tokens / 16u, acc_u);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  threadgroup float* gslab = (threadgroup float*)tile_words + sg * 2u * 8u * STAGING_LD;
  threadgroup float* uslab = gslab + 8u * STAGING_LD;
  const uint i = i0 + 32u * c + lane, h_ld = HALF_ROW_LD(gd.rows);
  device ushort* dst = b.shared ? sh : h + ulong(b.begin) * h_ld;
  for (uint s = 0; s < tokens / 16u; ++s) {
    stage_slab(acc_g, s, gslab);
    stage_slab(acc_u, s, uslab);
    for (uint r = 0; r < 8u; ++r) {
      const uint t = t0 + half_tokens * m + 8u * s + r;
      const float v = silu(gslab[r * STAGING_LD + lane]) * uslab[r * STAGING_LD + lane];
      if (t < b.count && i < h_ld) dst[ulong(t) * h_ld + i] = as_type<ushort>(half(i < gd.rows ? v : 0.0f));
    }
    slab_done();
  }
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void moe_gate_up_tiled(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                              device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                              device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                              device const uchar* sgw [[buffer(6)]], device const uchar* sgs [[buffer(7)]],
                              device const uchar* sgb [[buffer(8)]], device const uchar* suw [[buffer(9)]],
                              device const uchar* sus [[buffer(10)]], device const uchar* sub [[buffer(11)]],
                              device const uint4* x [[buffer(12)]], device const uint* offsets [[buffer(13)]],
                              device const uint* entries [[buffer(14)]], device ushort* h [[buffer(15)]],
                              device ushort* sh [[buffer(16)]], constant MoeTiledParams& p [[buffer(17)]],
                              device const uint* tiles [[buffer(18)]], uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  // The x, gate and up tiles, then the epilogue's slabs in their memory (32 KiB would not hold both).
  threadgroup uint4 tile_words[TILE_WORDS(GEMM_TILE_TOKENS + 2u * GEMM_TILE_ROWS, GEMM_K)];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  moe_gate_up_tile(gw, gs, gb, uw, us, ub, sgw, sgs, sgb, suw, sus, sub, x, offsets, entries, h, sh, p, group, tid, sg, lane,
                   tiles, tile_words, row_of, GEMM_TILE_TOKENS, true);
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void moe_gate_up_tiled_affine(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                              device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                              device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                              device const uchar* sgw [[buffer(6)]], device const uchar* sgs [[buffer(7)]],
                              device const uchar* sgb [[buffer(8)]], device const uchar* suw [[buffer(9)]],
                              device const uchar* sus [[buffer(10)]], device const uchar* sub [[buffer(11)]],
                              device const uint4* x [[buffer(12)]], device const uint* offsets [[buffer(13)]],
                              device const uint* entries [[buffer(14)]], device ushort* h [[buffer(15)]],
                              device ushort* sh [[buffer(16)]], constant MoeTiledParams& p [[buffer(17)]],
                              device const uint* tiles [[buffer(18)]], uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  // The x, gate and up tiles, then the epilogue's slabs in their memory (32 KiB would not hold both).
  threadgroup uint4 tile_words[TILE_WORDS(GEMM_TILE_TOKENS + 2u * GEMM_TILE_ROWS, GEMM_K)];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  moe_gate_up_tile(gw, gs, gb, uw, us, ub, sgw, sgs, sgb, suw, sus, sub, x, offsets, entries, h, sh, p, group, tid, sg, lane,
                   tiles, tile_words, row_of, GEMM_TILE_TOKENS, false);
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void moe_gate_up_tiled_affine_short(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                              device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                              device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                              device const uchar* sgw [[buffer(6)]], device const uchar* sgs [[buffer(7)]],
                              device const uchar* sgb [[buffer(8)]], device const uchar* suw [[buffer(9)]],
                              device const uchar* sus [[buffer(10)]], device const uchar* sub [[buffer(11)]],
                              device const uint4* x [[buffer(12)]], device const uint* offsets [[buffer(13)]],
                              device const uint* entries [[buffer(14)]], device ushort* h [[buffer(15)]],
                              device ushort* sh [[buffer(16)]], constant MoeTiledParams& p [[buffer(17)]],
                              device const uint* tiles [[buffer(18)]], uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  // The x, gate and up tiles, then the epilogue's slabs in their memory (32 KiB would not hold both).
  threadgroup uint4 tile_words[TILE_WORDS(GEMM_TILE_TOKENS + 2u * GEMM_TILE_ROWS, GEMM_K)];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  moe_gate_up_tile(gw, gs, gb, uw, us, ub, sgw, sgs, sgb, suw, sus, sub, x, offsets, entries, h, sh, p, group, tid, sg, lane,
                   tiles, tile_words, row_of, MOE_SHORT_TILE_TOKENS, false);
}

// The `_q4` builds of moe_gate_up_tiled for MLX 4-bit weights in groups of 64 (params.h,
// Q4_GATE_UP_TILE_ROWS): tiles of `tile_tokens` bucket rows (GEMM_TILE_TOKENS, or MOE_SHORT_TILE_TOKENS
// for the `_short` build) by Q4_GATE_UP_TILE_ROWS gate and up rows, of which the tile computes `tokens`
// (tile_tokens, or half of it for a half tile: the kernels call this once per size, so that each call's
// loops over the rows are unrolled for a known count); each simdgroup reads 16 gate rows and
// the same 16 up rows straight into its fragments (simdgroup_q4_load) instead of through threadgroup
// tiles, which every simdgroup of the 2x2 builds read twice, and applies SwiGLU to its own
// accumulators. Same bindings and results as the other builds.
inline void moe_gate_up_q4_tile(
    device const uchar* gw, device const uchar* gs, device const uchar* gb, device const uchar* uw,
    device const uchar* us, device const uchar* ub, device const uchar* sgw, device const uchar* sgs,
    device const uchar* sgb, device const uchar* suw, device const uchar* sus, device const uchar* sub,
    device const uint4* x, device const uint* offsets, device const uint* entries, device ushort* h,
    device ushort* sh, constant MoeTiledParams& p, uint3 group, uint tid, uint sg, ushort lane,
    device const uint* tiles, threadgroup uint4* x_words, threadgroup uint* staged, threadgroup uint* row_of,
    uint tile_tokens, uint tokens) {
  if (group.y >= tiles[0]) return;  // the whole threadgroup: past the buckets' tiles
  const uint tile = tiles[1u + group.y], e = tile >> 16u, ec = min(e, p.experts - 1u);
  const Bucket b = bucket_of(offsets, e, p.experts, p.n);
  const uint t0 = tile_tokens * tile_in_bucket(tile), i0 = Q4_GATE_UP_TILE_ROWS * group.x;
  const WeightDesc gd = pick_expert_weight(p.gate, p.sgate, b.shared);
  const WeightDesc ud = pick_expert_weight(p.up, p.sup, b.shared);
  if (t0 >= b.count || i0 >= gd.rows) return;  // the whole threadgroup: past the bucket or the rows

  threadgroup half* xt = (threadgroup half*)x_words;
  device const uchar* gdata = b.shared ? sgw : gw + expert_bytes(p.gate, ec);
  device const uchar* gscales = b.shared ? sgs : gs + expert_scale_bytes(p.gate, ec);
  device const uchar* gbiases = b.shared ? sgb : gb + expert_scale_bytes(p.gate, ec);
  device const uchar* udata = b.shared ? suw : uw + expert_bytes(p.up, ec);
  device const uchar* uscales = b.shared ? sus : us + expert_scale_bytes(p.up, ec);
  device const uchar* ubiases = b.shared ? sub : ub + expert_scale_bytes(p.up, ec);
  if (tid < tokens) {
    const uint r = min(t0 + tid, b.count - 1u);
    row_of[tid] = b.shared ? r : entries[b.begin + r] / p.k;  // the entry's token
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // The simdgroup's rows: 2 blocks of 8 of the gate (q[0], q[1]) and the same of the up (q[2], q[3]),
  // whose staged scales follow the gate's Q4_GATE_UP_TILE_ROWS.
  const uint r0 = i0 + 16u * sg;
  simdgroup_float8x8 acc[4u * GEMM_TILE_TOKENS / 8u];  // acc[4i + j]: token block i, row block j
  for (uint i = 0; i < 4u * tokens / 8u; ++i) acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const uint ld = HALF_ROW_LD(p.hidden);
  const uint runs = tokens * GEMM_K / 8u / uint(GEMM_THREADS);
  const ActivationRows xrows = activation_rows(ld, row_of, GEMM_K, runs, tid, GEMM_THREADS);
  ActivationRuns xr = fetch_activations(x, ld, xrows, 0u, GEMM_K, runs);
  simdgroup_q4_block q[4];
  q4_load_blocks(q, gd, gdata, r0, 0u, 2u, lane);
  q4_load_blocks(q + 2, ud, udata, r0, 0u, 2u, lane);
  for (uint k0 = 0; k0 < p.hidden; k0 += GEMM_K) {
    const uint step = k0 / GEMM_K, slot = step % Q4_SCALE_GROUPS;
    if (slot == 0u) {
      stage_q4_scales(gd, gscales, gbiases, i0, Q4_GATE_UP_TILE_ROWS, step, staged, tid, GEMM_THREADS);
      stage_q4_scales(ud, uscales, ubiases, i0, Q4_GATE_UP_TILE_ROWS, step, staged + 2u * Q4_GATE_UP_TILE_ROWS, tid,
                      GEMM_THREADS);
    }
    store_activations(xr, xt, GEMM_K, runs, tid, GEMM_THREADS);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads (the last step's again after the last), in flight during the products.
    const uint next = min(k0 + GEMM_K, p.hidden - GEMM_K);
    xr = fetch_activations(x, ld, xrows, next, GEMM_K, runs);
    simdgroup_q4_block qn[4];
    q4_load_blocks(qn, gd, gdata, r0, next, 2u, lane);
    q4_load_blocks(qn + 2, ud, udata, r0, next, 2u, lane);
    threadgroup const uint* gsb = staged + 2u * (slot * Q4_TILE_ROWS + 16u * sg);
    q4_products(xt, q, gsb, gsb + 2u * Q4_GATE_UP_TILE_ROWS, tokens / 8u, lane, acc);
    for (uint j = 0; j < 4u; ++j) q[j] = qn[j];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  // The epilogue's slabs in the staged scales' memory (no longer read): columns 0-15 of a slab are the
  // gate's rows, 16-31 the up's; lane l takes row l % 16 of tokens 2m + l / 16. h is written in
  // q4_fragment_column order, the order of the `_q4` down builds' tiles.
  threadgroup float* slab = (threadgroup float*)staged + sg * 8u * STAGING_LD;
  const uint c = lane % 16u, i = r0 + c, h_ld = HALF_ROW_LD(gd.rows), hi = q4_fragment_index(i);
  device ushort* dst = b.shared ? sh : h + ulong(b.begin) * h_ld;
  for (uint s = 0; s < tokens / 8u; ++s) {
    stage_slab(acc, s, slab);
    for (uint m = 0; m < 4u; ++m) {
      const uint r = 2u * m + lane / 16u, t = t0 + 8u * s + r;
      const float v = silu(slab[r * STAGING_LD + c]) * slab[r * STAGING_LD + 16u + c];
      if (t < b.count && i < h_ld) dst[ulong(t) * h_ld + hi] = as_type<ushort>(half(i < gd.rows ? v : 0.0f));
    }
    slab_done();
  }
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] MIN_RESIDENT_THREADGROUPS(3) kernel void moe_gate_up_tiled_q4(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                              device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                              device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                              device const uchar* sgw [[buffer(6)]], device const uchar* sgs [[buffer(7)]],
                              device const uchar* sgb [[buffer(8)]], device const uchar* suw [[buffer(9)]],
                              device const uchar* sus [[buffer(10)]], device const uchar* sub [[buffer(11)]],
                              device const uint4* x [[buffer(12)]], device const uint* offsets [[buffer(13)]],
                              device const uint* entries [[buffer(14)]], device ushort* h [[buffer(15)]],
                              device ushort* sh [[buffer(16)]], constant MoeTiledParams& p [[buffer(17)]],
                              device const uint* tiles [[buffer(18)]], uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS, GEMM_K)];
  threadgroup uint staged[2u * Q4_SCALE_GROUPS * Q4_TILE_ROWS];  // the gate's and the up's, then the slabs
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  if (is_half_tile(tiles, group.y))
    moe_gate_up_q4_tile(gw, gs, gb, uw, us, ub, sgw, sgs, sgb, suw, sus, sub, x, offsets, entries, h, sh, p, group, tid,
                        sg, ushort(lane), tiles, x_words, staged, row_of, GEMM_TILE_TOKENS, GEMM_TILE_TOKENS / 2u);
  else
    moe_gate_up_q4_tile(gw, gs, gb, uw, us, ub, sgw, sgs, sgb, suw, sus, sub, x, offsets, entries, h, sh, p, group, tid,
                        sg, ushort(lane), tiles, x_words, staged, row_of, GEMM_TILE_TOKENS, GEMM_TILE_TOKENS);
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] MIN_RESIDENT_THREADGROUPS(5) kernel void moe_gate_up_tiled_q4_short(device const uchar* gw [[buffer(0)]], device const uchar* gs [[buffer(1)]],
                              device const uchar* gb [[buffer(2)]], device const uchar* uw [[buffer(3)]],
                              device const uchar* us [[buffer(4)]], device const uchar* ub [[buffer(5)]],
                              device const uchar* sgw [[buffer(6)]], device const uchar* sgs [[buffer(7)]],
                              device const uchar* sgb [[buffer(8)]], device const uchar* suw [[buffer(9)]],
                              device const uchar* sus [[buffer(10)]], device const uchar* sub [[buffer(11)]],
                              device const uint4* x [[buffer(12)]], device const uint* offsets [[buffer(13)]],
                              device const uint* entries [[buffer(14)]], device ushort* h [[buffer(15)]],
                              device ushort* sh [[buffer(16)]], constant MoeTiledParams& p [[buffer(17)]],
                              device const uint* tiles [[buffer(18)]], uint3 group [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(MOE_SHORT_TILE_TOKENS, GEMM_K)];
  threadgroup uint staged[2u * Q4_SCALE_GROUPS * Q4_TILE_ROWS];  // the gate's and the up's, then the slabs
  threadgroup uint row_of[MOE_SHORT_TILE_TOKENS];
  if (is_half_tile(tiles, group.y))
    moe_gate_up_q4_tile(gw, gs, gb, uw, us, ub, sgw, sgs, sgb, suw, sus, sub, x, offsets, entries, h, sh, p, group, tid,
                        sg, ushort(lane), tiles, x_words, staged, row_of, MOE_SHORT_TILE_TOKENS, MOE_SHORT_TILE_TOKENS / 2u);
  else
    moe_gate_up_q4_tile(gw, gs, gb, uw, us, ub, sgw, sgs, sgb, suw, sus, sub, x, offsets, entries, h, sh, p, group, tid,
                        sg, ushort(lane), tiles, x_words, staged, row_of, MOE_SHORT_TILE_TOKENS, MOE_SHORT_TILE_TOKENS);
}

// y[position, c] = weight(entry) · down_e[c] · h[position] for the entries of expert e's bucket (the
// shared expert: ys[t, c] = shared_scale · sigmoid(gate_logit[t]) · sdown[c] · sh[t]), h and sh the
// half rows of moe_gate_up_tiled. Threadgroup (row tile of c, tile s of moe_tile_list's). Two builds, as
// moe_gate_up_tiled.
inline void moe_down_tile(
    device const uchar* dw, device const uchar* ds, device const uchar* db, device const uchar* sdw,
    device const uchar* sds, device const uchar* sdb, device const uint4* h, device const uint4* sh,
    device const uint* offsets, device const uint* entries, device const float* weights,
    device const float* gate_logit, device float* y, device float* ys, constant MoeTiledParams& p, uint3 group,
    uint tid, uint sg, uint lane, threadgroup uint4* x_words, threadgroup uint4* w_words, threadgroup float* staging,
    device const uint* tiles, threadgroup uint* row_of, threadgroup float* factor, uint tokens, bool dense) {
  if (group.y >= tiles[0]) return;  // the whole threadgroup: past the buckets' tiles
  const uint tile = tiles[1u + group.y], e = tile >> 16u, ec = min(e, p.experts - 1u);
  const Bucket b = bucket_of(offsets, e, p.experts, p.n);
  const uint t0 = tokens * tile_in_bucket(tile), c0 = GEMM_TILE_ROWS * group.x, half_tokens = tokens / 2u;
  if (t0 >= b.count || c0 >= p.hidden) return;  // the whole threadgroup: past the bucket or the rows

  const WeightDesc dd = pick_expert_weight(p.down, p.sdown, b.shared);
  device const uchar* data = b.shared ? sdw : dw + expert_bytes(p.down, ec);
  device const uchar* scales = b.shared ? sds : ds + expert_scale_bytes(p.down, ec);
  device const uchar* biases = b.shared ? sdb : db + expert_scale_bytes(p.down, ec);
  device const uint4* src = b.shared ? sh : h;
  threadgroup half* xt = (threadgroup half*)x_words;
  threadgroup half* wt = (threadgroup half*)w_words;
  if (tid < tokens) {
    const uint r = min(t0 + tid, b.count - 1u);
    const uint entry = entries[min(b.begin + r, p.n * p.k - 1u)];
    const float logit = gate_logit[b.shared ? r : 0u];
    row_of[tid] = b.begin + r;  // h rows are in bucket order; sh rows are tokens
    factor[tid] = b.shared ? p.shared_scale * sigmoid(logit) : weights[entry];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint m = sg / 2u, c = sg % 2u;
  const bool keep = keeps_scale_words(tokens, dense);
  simdgroup_float8x8 acc[16];
  for (uint i = 0; i < 16u; ++i) acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const uint ld = HALF_ROW_LD(dd.cols);
  const uint runs = tokens * GEMM_K / 8u / uint(GEMM_THREADS);
  const ActivationRows xrows = activation_rows(ld, row_of, GEMM_K, runs, tid, GEMM_THREADS);
  ActivationRuns xr = fetch_activations(src, ld, xrows, 0u, GEMM_K, runs);
  WeightRuns wr =
      fetch_weights(dd, data, scales, biases, c0, dd.rows, 0u, GEMM_K, tid, dense, no_weight_runs(), false);
  for (uint k0 = 0; k0 < dd.cols; k0 += GEMM_K) {
    store_activations(xr, xt, GEMM_K, runs, tid, GEMM_THREADS);
    store_weights(wr, dd, data, scales, biases, c0, dd.rows, k0, GEMM_K, wt, tid, dense);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads, in flight during the products.
    xr = fetch_activations(src, ld, xrows, k0 + GEMM_K, GEMM_K, runs);
    wr = fetch_weights(dd, data, scales, biases, c0, dd.rows, k0 + GEMM_K, GEMM_K, tid, dense, wr, keep);
    tile_products(xt, wt, GEMM_K, half_tokens * m, 32u * c, tokens / 16u, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  threadgroup float* slab = staging + sg * 8u * STAGING_LD;
  const uint col = c0 + 32u * c + lane;
  device float* dst = b.shared ? ys : y + ulong(b.begin) * p.hidden;
  for (uint s = 0; s < tokens / 16u; ++s) {
    stage_slab(acc, s, slab);
    for (uint r = 0; r < 8u; ++r) {
      const uint t = t0 + half_tokens * m + 8u * s + r;
      const float v = slab[r * STAGING_LD + lane] * factor[half_tokens * m + 8u * s + r];
      if (t < b.count && col < p.hidden) dst[ulong(t) * p.hidden + col] = v;
    }
    slab_done();
  }
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void moe_down_tiled(device const uchar* dw [[buffer(0)]], device const uchar* ds [[buffer(1)]],
                           device const uchar* db [[buffer(2)]], device const uchar* sdw [[buffer(3)]],
                           device const uchar* sds [[buffer(4)]], device const uchar* sdb [[buffer(5)]],
                           device const uint4* h [[buffer(6)]], device const uint4* sh [[buffer(7)]],
                           device const uint* offsets [[buffer(8)]], device const uint* entries [[buffer(9)]],
                           device const float* weights [[buffer(10)]], device const float* gate_logit [[buffer(11)]],
                           device float* y [[buffer(12)]], device float* ys [[buffer(13)]],
                           constant MoeTiledParams& p [[buffer(14)]], device const uint* tiles [[buffer(15)]],
                           uint3 group [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS, GEMM_K)];
  threadgroup uint4 w_words[TILE_WORDS(GEMM_TILE_ROWS, GEMM_K)];
  threadgroup float staging[4u * 8u * STAGING_LD];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  threadgroup float factor[GEMM_TILE_TOKENS];
  moe_down_tile(dw, ds, db, sdw, sds, sdb, h, sh, offsets, entries, weights, gate_logit, y, ys, p, group, tid, sg, lane,
                x_words, w_words, staging, tiles, row_of, factor, GEMM_TILE_TOKENS, true);
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void moe_down_tiled_affine(device const uchar* dw [[buffer(0)]], device const uchar* ds [[buffer(1)]],
                           device const uchar* db [[buffer(2)]], device const uchar* sdw [[buffer(3)]],
                           device const uchar* sds [[buffer(4)]], device const uchar* sdb [[buffer(5)]],
                           device const uint4* h [[buffer(6)]], device const uint4* sh [[buffer(7)]],
                           device const uint* offsets [[buffer(8)]], device const uint* entries [[buffer(9)]],
                           device const float* weights [[buffer(10)]], device const float* gate_logit [[buffer(11)]],
                           device float* y [[buffer(12)]], device float* ys [[buffer(13)]],
                           constant MoeTiledParams& p [[buffer(14)]], device const uint* tiles [[buffer(15)]],
                           uint3 group [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS, GEMM_K)];
  threadgroup uint4 w_words[TILE_WORDS(GEMM_TILE_ROWS, GEMM_K)];
  threadgroup float staging[4u * 8u * STAGING_LD];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  threadgroup float factor[GEMM_TILE_TOKENS];
  moe_down_tile(dw, ds, db, sdw, sds, sdb, h, sh, offsets, entries, weights, gate_logit, y, ys, p, group, tid, sg, lane,
                x_words, w_words, staging, tiles, row_of, factor, GEMM_TILE_TOKENS, false);
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] kernel void moe_down_tiled_affine_short(device const uchar* dw [[buffer(0)]], device const uchar* ds [[buffer(1)]],
                           device const uchar* db [[buffer(2)]], device const uchar* sdw [[buffer(3)]],
                           device const uchar* sds [[buffer(4)]], device const uchar* sdb [[buffer(5)]],
                           device const uint4* h [[buffer(6)]], device const uint4* sh [[buffer(7)]],
                           device const uint* offsets [[buffer(8)]], device const uint* entries [[buffer(9)]],
                           device const float* weights [[buffer(10)]], device const float* gate_logit [[buffer(11)]],
                           device float* y [[buffer(12)]], device float* ys [[buffer(13)]],
                           constant MoeTiledParams& p [[buffer(14)]], device const uint* tiles [[buffer(15)]],
                           uint3 group [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS, GEMM_K)];
  threadgroup uint4 w_words[TILE_WORDS(GEMM_TILE_ROWS, GEMM_K)];
  threadgroup float staging[4u * 8u * STAGING_LD];
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  threadgroup float factor[GEMM_TILE_TOKENS];
  moe_down_tile(dw, ds, db, sdw, sds, sdb, h, sh, offsets, entries, weights, gate_logit, y, ys, p, group, tid, sg, lane,
                x_words, w_words, staging, tiles, row_of, factor, MOE_SHORT_TILE_TOKENS, false);
}

// The `_q4` builds of moe_down_tiled (as moe_gate_up_tiled_q4: tiles of `tile_tokens` bucket rows, `tokens`
// of them computed, by Q4_TILE_ROWS output columns of the down projection, 32 per simdgroup read straight
// into its fragments).
inline void moe_down_q4_tile(
    device const uchar* dw, device const uchar* ds, device const uchar* db, device const uchar* sdw,
    device const uchar* sds, device const uchar* sdb, device const uint4* h, device const uint4* sh,
    device const uint* offsets, device const uint* entries, device const float* weights,
    device const float* gate_logit, device float* y, device float* ys, constant MoeTiledParams& p, uint3 group,
    uint tid, uint sg, ushort lane, threadgroup uint4* x_words, threadgroup uint* staged, device const uint* tiles,
    threadgroup uint* row_of, threadgroup float* factor, uint tile_tokens, uint tokens) {
  if (group.y >= tiles[0]) return;  // the whole threadgroup: past the buckets' tiles
  const uint tile = tiles[1u + group.y], e = tile >> 16u, ec = min(e, p.experts - 1u);
  const Bucket b = bucket_of(offsets, e, p.experts, p.n);
  const uint t0 = tile_tokens * tile_in_bucket(tile), c0 = Q4_TILE_ROWS * group.x;
  if (t0 >= b.count || c0 >= p.hidden) return;  // the whole threadgroup: past the bucket or the rows

  const WeightDesc dd = pick_expert_weight(p.down, p.sdown, b.shared);
  device const uchar* data = b.shared ? sdw : dw + expert_bytes(p.down, ec);
  device const uchar* scales = b.shared ? sds : ds + expert_scale_bytes(p.down, ec);
  device const uchar* biases = b.shared ? sdb : db + expert_scale_bytes(p.down, ec);
  device const uint4* src = b.shared ? sh : h;
  threadgroup half* xt = (threadgroup half*)x_words;
  if (tid < tokens) {
    const uint r = min(t0 + tid, b.count - 1u);
    const uint entry = entries[min(b.begin + r, p.n * p.k - 1u)];
    const float logit = gate_logit[b.shared ? r : 0u];
    row_of[tid] = b.begin + r;  // h rows are in bucket order; sh rows are tokens
    factor[tid] = b.shared ? p.shared_scale * sigmoid(logit) : weights[entry];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint r0 = c0 + 32u * sg;  // the simdgroup's output columns: 4 blocks of 8 rows of down
  simdgroup_float8x8 acc[4u * GEMM_TILE_TOKENS / 8u];  // acc[4i + j]: token block i, row block j
  for (uint i = 0; i < 4u * tokens / 8u; ++i) acc[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  const uint ld = HALF_ROW_LD(dd.cols);
  const uint runs = tokens * GEMM_K / 8u / uint(GEMM_THREADS);
  const ActivationRows xrows = activation_rows(ld, row_of, GEMM_K, runs, tid, GEMM_THREADS);
  ActivationRuns xr = fetch_activations(src, ld, xrows, 0u, GEMM_K, runs);
  simdgroup_q4_block q[4];
  q4_load_blocks(q, dd, data, r0, 0u, 4u, lane);
  for (uint k0 = 0; k0 < dd.cols; k0 += GEMM_K) {
    const uint step = k0 / GEMM_K, slot = step % Q4_SCALE_GROUPS;
    if (slot == 0u) stage_q4_scales(dd, scales, biases, c0, Q4_TILE_ROWS, step, staged, tid, GEMM_THREADS);
    store_activations(xr, xt, GEMM_K, runs, tid, GEMM_THREADS);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The next step's reads (the last step's again after the last), in flight during the products.
    const uint next = min(k0 + GEMM_K, dd.cols - GEMM_K);
    xr = fetch_activations(src, ld, xrows, next, GEMM_K, runs);
    simdgroup_q4_block qn[4];
    q4_load_blocks(qn, dd, data, r0, next, 4u, lane);
    threadgroup const uint* sb = staged + 2u * (slot * Q4_TILE_ROWS + 32u * sg);
    q4_products(xt, q, sb, sb + 32u, tokens / 8u, lane, acc);
    for (uint j = 0; j < 4u; ++j) q[j] = qn[j];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  // The epilogue's slabs in the staged scales' memory (no longer read).
  threadgroup float* slab = (threadgroup float*)staged + sg * 8u * STAGING_LD;
  const uint col = r0 + lane;
  device float* dst = b.shared ? ys : y + ulong(b.begin) * p.hidden;
  for (uint s = 0; s < tokens / 8u; ++s) {
    stage_slab(acc, s, slab);
    for (uint r = 0; r < 8u; ++r) {
      const uint t = t0 + 8u * s + r;
      const float v = slab[r * STAGING_LD + lane] * factor[8u * s + r];
      if (t < b.count && col < p.hidden) dst[ulong(t) * p.hidden + col] = v;
    }
    slab_done();
  }
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] MIN_RESIDENT_THREADGROUPS(3) kernel void moe_down_tiled_q4(device const uchar* dw [[buffer(0)]], device const uchar* ds [[buffer(1)]],
                           device const uchar* db [[buffer(2)]], device const uchar* sdw [[buffer(3)]],
                           device const uchar* sds [[buffer(4)]], device const uchar* sdb [[buffer(5)]],
                           device const uint4* h [[buffer(6)]], device const uint4* sh [[buffer(7)]],
                           device const uint* offsets [[buffer(8)]], device const uint* entries [[buffer(9)]],
                           device const float* weights [[buffer(10)]], device const float* gate_logit [[buffer(11)]],
                           device float* y [[buffer(12)]], device float* ys [[buffer(13)]],
                           constant MoeTiledParams& p [[buffer(14)]], device const uint* tiles [[buffer(15)]],
                           uint3 group [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(GEMM_TILE_TOKENS, GEMM_K)];
  threadgroup uint staged[2u * Q4_SCALE_GROUPS * Q4_TILE_ROWS];  // then the epilogue's slabs
  threadgroup uint row_of[GEMM_TILE_TOKENS];
  threadgroup float factor[GEMM_TILE_TOKENS];
  if (is_half_tile(tiles, group.y))
    moe_down_q4_tile(dw, ds, db, sdw, sds, sdb, h, sh, offsets, entries, weights, gate_logit, y, ys, p, group, tid, sg,
                     ushort(lane), x_words, staged, tiles, row_of, factor, GEMM_TILE_TOKENS, GEMM_TILE_TOKENS / 2u);
  else
    moe_down_q4_tile(dw, ds, db, sdw, sds, sdb, h, sh, offsets, entries, weights, gate_logit, y, ys, p, group, tid, sg,
                     ushort(lane), x_words, staged, tiles, row_of, factor, GEMM_TILE_TOKENS, GEMM_TILE_TOKENS);
}

[[max_total_threads_per_threadgroup(GEMM_THREADS)]] MIN_RESIDENT_THREADGROUPS(5) kernel void moe_down_tiled_q4_short(device const uchar* dw [[buffer(0)]], device const uchar* ds [[buffer(1)]],
                           device const uchar* db [[buffer(2)]], device const uchar* sdw [[buffer(3)]],
                           device const uchar* sds [[buffer(4)]], device const uchar* sdb [[buffer(5)]],
                           device const uint4* h [[buffer(6)]], device const uint4* sh [[buffer(7)]],
                           device const uint* offsets [[buffer(8)]], device const uint* entries [[buffer(9)]],
                           device const float* weights [[buffer(10)]], device const float* gate_logit [[buffer(11)]],
                           device float* y [[buffer(12)]], device float* ys [[buffer(13)]],
                           constant MoeTiledParams& p [[buffer(14)]], device const uint* tiles [[buffer(15)]],
                           uint3 group [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 x_words[TILE_WORDS(MOE_SHORT_TILE_TOKENS, GEMM_K)];
  threadgroup uint staged[2u * Q4_SCALE_GROUPS * Q4_TILE_ROWS];  // then the epilogue's slabs
  threadgroup uint row_of[MOE_SHORT_TILE_TOKENS];
  threadgroup float factor[MOE_SHORT_TILE_TOKENS];
  if (is_half_tile(tiles, group.y))
    moe_down_q4_tile(dw, ds, db, sdw, sds, sdb, h, sh, offsets, entries, weights, gate_logit, y, ys, p, group, tid, sg,
                     ushort(lane), x_words, staged, tiles, row_of, factor, MOE_SHORT_TILE_TOKENS, MOE_SHORT_TILE_TOKENS / 2u);
  else
    moe_down_q4_tile(dw, ds, db, sdw, sds, sdb, h, sh, offsets, entries, weights, gate_logit, y, ys, p, group, tid, sg,
                     ushort(lane), x_words, staged, tiles, row_of, factor, MOE_SHORT_TILE_TOKENS, MOE_SHORT_TILE_TOKENS);
}

// out[t, c] = Σ_s y[positions[t·k + s], c] in slot order, then + ys[t, c] with the shared expert (the
// CPU backend's order). Thread i takes columns 4j .. 4j+3 of one token (j = i mod hidden / 4), one
// 16-byte load per row of y and ys (scratch rows, 16-byte aligned): hidden is a multiple of 4 (the
// experts' gate rows are whole 16-byte chunks of it in every stored format: GpuBackend::upload).
[[max_total_threads_per_threadgroup(ELEMENTWISE_THREADS)]] kernel void moe_combine(device const float4* y [[buffer(0)]], device const float4* ys [[buffer(1)]],
                        device const uint* positions [[buffer(2)]], device float* out [[buffer(3)]],
                        constant MoeTiledParams& p [[buffer(4)]], uint i [[thread_position_in_grid]]) {
  const uint runs = p.hidden / 4u, count = p.n * runs;
  const uint ic = min(i, count - 1u), t = ic / runs, j = ic % runs;
  float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (uint s = 0; s < p.k; ++s) {
    const float4 v = y[ulong(positions[t * p.k + s]) * runs + j];
    sum[0] += v.x, sum[1] += v.y, sum[2] += v.z, sum[3] += v.w;
  }
  const float4 shared = ys[ic];  // bound (and unread by the sums) without a shared expert too
  const float extra[4] = {shared.x, shared.y, shared.z, shared.w};
  if (i < count)  // out may be a view at any float: four stores
    for (uint e = 0; e < 4u; ++e) out[4u * ulong(i) + e] = p.shared != 0u ? sum[e] + extra[e] : sum[e];
}
