// Parameter structs shared by the host (C++) and the kernels (MSL, and through the translator the CPU
// emulator and CUDA). Fields are 4-byte scalars only, so the layout is identical in all three; a kernel
// receives its struct as `constant T& p [[buffer(n)]]` (setBytes on Metal, a by-value argument on CUDA).
#ifndef MOELENS_SHADER_PARAMS_H
#define MOELENS_SHADER_PARAMS_H

// Stored weight formats: MLX affine 4/8-bit (w = scale * q + bias per group of input columns, q packed
// least-significant first in uint32 words), or dense rows.
#define WEIGHT_Q4 4u
#define WEIGHT_Q8 8u
#define WEIGHT_BF16 16u
#define WEIGHT_F16 17u
#define WEIGHT_F32 32u

// Element type of the quantization scales and biases.
#define SCALE_BF16 0u
#define SCALE_F16 1u
#define SCALE_F32 2u

// The GEMV-class kernels (projections, experts): each simdgroup computes GEMV_ROWS output rows (the
// x values it loads serve them all), loading GEMV_UNROLL words of each row per lane at once;
// GEMV_SIMDGROUPS simdgroups per threadgroup; a matrix with few rows is split over up to
// GEMV_SIMDGROUPS simdgroups per block until the launch has GEMV_TARGET_THREADGROUPS threadgroups.
// bench/gpu/gemv-sweep.sh measures the choices on the H200 (a build may override these with -D).
#ifndef GEMV_ROWS
#define GEMV_ROWS 2u
#endif
#ifndef GEMV_UNROLL
#define GEMV_UNROLL 2u
#endif
#ifndef GEMV_TARGET_THREADGROUPS
#define GEMV_TARGET_THREADGROUPS 512u
#endif
// moe_down reads the k experts' rows as one long row: more words per lane at once.
#ifndef MOE_DOWN_UNROLL
#define MOE_DOWN_UNROLL 8u
#endif
#ifndef GEMV_SIMDGROUPS
#define GEMV_SIMDGROUPS 4u
#endif
#ifndef GEMV_THREADS
#define GEMV_THREADS 128  // GEMV_SIMDGROUPS * 32, as a literal for the kernels' attribute
#endif
// The exact GEMV of 4-bit matrices on the matrix units (gemv_exact.metal): GEMV_EXACT_SIMDGROUPS
// simdgroups of 16 rows (two blocks of 8) per threadgroup; x split into pieces GEMV_EXACT_CHUNK columns
// at a time.
#define GEMV_EXACT_SIMDGROUPS 4u
#define GEMV_EXACT_THREADS 128  // GEMV_EXACT_SIMDGROUPS * 32, as a literal for the kernel's attribute
#define GEMV_EXACT_ROWS 16u     // per simdgroup
#define GEMV_EXACT_CHUNK 1024u

// The fp16 precision's GEMVs (gemv_int16: calls shorter than PREFILL_MIN_TOKENS, 4-bit weights with
// bf16 scales): each row of x is quantised once per call (quantize_int16) in blocks of INT16_BLOCK
// columns, d = max|x| / INT16_QMAX and q = round(x / d), half to even, as the CPU backend's int16
// precision rounds (native/backends/cpu/int8.h), and the products are integer (two 16-bit by 8-bit
// products per instruction with CUDA's dp2a). Each block's error is at most d / 2 per element.
#define INT16_BLOCK 32u
#define INT16_QMAX 16256.0f
#define QUANTIZE_SIMDGROUPS 4u
#define QUANTIZE_THREADS 128  // QUANTIZE_SIMDGROUPS * 32, as a literal for the kernel's attribute
struct QuantizeParams {
  uint n;     // rows
  uint cols;  // per row, a multiple of INT16_BLOCK
};

// Prefill: a call of at least PREFILL_MIN_TOKENS tokens runs on the tiled kernels (matrix units, fp16
// operands, fp32 accumulation) when the backend's precision is fp16; shorter calls (decode) on the
// GEMV-class kernels above. The crossover measured on the H200 (`moelens-gpu-bench prefill`, full shape):
// tiled against the decode kernels 0.73x at 1 token, 0.92x at 2, 1.18x at 4, 1.73x at 8, 2.39x at 16.
// GpuBackend takes another threshold at load (prefill_min_tokens; the SDK's prefillMinTokens).
#ifndef PREFILL_MIN_TOKENS
#define PREFILL_MIN_TOKENS 4u
#endif
// Tokens per forward chunk of a long prompt on the GPU (scratch memory grows with it).
#ifndef PREFILL_CHUNK
#define PREFILL_CHUNK 4096u
#endif
// The tiled prefill kernels (shaders/gemm.metal, moe_prefill.metal): a threadgroup of GEMM_THREADS
// (4 simdgroups, 2x2) computes a tile of GEMM_TILE_TOKENS tokens x GEMM_TILE_ROWS output rows, each
// simdgroup a 32x32 quarter as 4x4 simdgroup matrices of 8x8, stepping through the columns GEMM_K at
// a time. GEMM_K is one quantization group of the MLX checkpoints: per half row and step a thread
// makes one 16-byte load of 4-bit values and at most one scale and one bias load (a step sharing the
// previous step's scale words keeps them), and each step has 64 columns of reads in flight. The tiles hold half (the matrix units' operands), rows padded by GEMM_PAD halfs
// (144 bytes apart at 64 columns, 80 at 32: an odd number of 16-byte units, so the 8 rows of an 8x8
// load fall on distinct banks); the epilogue's fp32 rows by GEMM_OUT_PAD floats.
#define GEMM_TILE_TOKENS 64u
#define GEMM_TILE_ROWS 64u
#define GEMM_K 64u
#define GEMM_PAD 8u
#define GEMM_OUT_PAD 8u
#define GEMM_THREADS 128
// Chunks of at least GEMM_WIDE_MIN_TOKENS tokens run gemm_wide unless gemm_q4 takes every job (on the
// H200 gemm is faster up to 1,024 tokens, gemm_wide at 4,096): tiles of GEMM_WIDE_TILE tokens x
// GEMM_WIDE_TILE rows on GEMM_WIDE_THREADS (8 simdgroups of 64x32), GEMM_WIDE_K columns per step
// (two 128 x 72-half tiles would take 36 KiB of threadgroup memory, over Metal's 32 KiB), the
// epilogue staged in the activation tile (8 slabs of 8 x STAGING_LD floats fit in its 128 x 40 halfs).
#ifndef GEMM_WIDE_MIN_TOKENS
#define GEMM_WIDE_MIN_TOKENS 2048u
#endif
#define GEMM_WIDE_TILE 128u
#define GEMM_WIDE_K 32u
#define GEMM_WIDE_THREADS 256
// The exact GEMM (gemm_exact.metal: the fp32 jobs of a tiled(n) call, the router): fp32 accuracy from
// split fp16 operands on the matrix units; a threadgroup of GEMM_EXACT_THREADS (4 simdgroups of 32x32)
// computes GEMM_EXACT_TILE tokens x GEMM_EXACT_TILE rows, stepping through the columns GEMM_EXACT_K at
// a time (four 64 x 40-half tiles: the two halfs of x and of W).
#define GEMM_EXACT_TILE 64u
#define GEMM_EXACT_K 32u
#define GEMM_EXACT_THREADS 128
// A launch of fewer than GEMM_EXACT_TARGET_THREADGROUPS / 2 threadgroups (a short chunk: the router's
// 5 row tiles x 8 token tiles at 512 tokens) splits the columns into parts of at least
// GEMM_EXACT_MIN_PART_STEPS K-steps, doubling the parts while the launch stays under the target (8 parts
// at 512 tokens, none at 4,096: faster on the H200 than 1,024's 16 and 2).
#ifndef GEMM_EXACT_TARGET_THREADGROUPS
#define GEMM_EXACT_TARGET_THREADGROUPS 512u
#endif
#define GEMM_EXACT_MIN_PART_STEPS 4u
// A gemm_q4 launch of at most Q4_PARTS_TARGET_THREADGROUPS / 2 threadgroups (an output projection at 512
// tokens: 128) runs on gemm_q4_parts, its columns in 2, 4, ... parts of whole stagings of scales while the
// launch stays within the target (3 resident per SM on an H200's 132).
#ifndef Q4_PARTS_TARGET_THREADGROUPS
#define Q4_PARTS_TARGET_THREADGROUPS 396u
#endif

// The norms: a threadgroup of NORM_THREADS per row, each thread holding up to NORM_MAX_PER_THREAD
// values in registers (rows up to 8192; the gated norm's rows up to 256).
#define NORM_THREADS 1024
#define NORM_MAX_PER_THREAD 8u
// The row-per-simdgroup kernels (gated_rms_norm): rows per threadgroup.
#define ROWS_PER_THREADGROUP 4u
#define ROW_THREADS 128
// The attention kernels' limits: query heads per KV head, query floats per KV head; attention_probs
// takes ATTN_CHUNK key positions per threadgroup.
#define ATTN_MAX_GROUP 16u
// attention_partial's build for groups up to ATTN_PARTIAL_GROUP (fewer registers: two threadgroups per
// SM of an H200 instead of one); attention_partial_wide takes the larger ones.
#define ATTN_PARTIAL_GROUP 8u
#define ATTN_MAX_QUERY_FLOATS 4096u
#ifndef ATTN_CHUNK
#define ATTN_CHUNK 16u
#endif
// Split-K attention (attention_partial, attention_combine: decode, short prefills, fp32): the key positions
// pos0 + n are cut into `splits` spans, one threadgroup per (span, KV head, token). The host picks the
// fewest splits that give the launch ATTN_SPLIT_TARGET_THREADGROUPS threadgroups (two per SM of an H200's
// 132, each with a block's K and V rows in flight), with spans of at least ATTN_SPLIT_MIN_SPAN keys (the
// queries staged and the partial written per threadgroup stay small against the span's K and V) and at
// most ATTN_MAX_SPLITS splits; spans are multiples of ATTN_SPLIT_BLOCK, the keys a threadgroup scores per
// step (ATTN_SPLIT_KEYS_PER_SIMDGROUP per simdgroup; each thread holds ATTN_SPLIT_KEYS_PER_THREAD V float4s).
#ifndef ATTN_SPLIT_TARGET_THREADGROUPS
#define ATTN_SPLIT_TARGET_THREADGROUPS 264u
#endif
#ifndef ATTN_SPLIT_MIN_SPAN
#define ATTN_SPLIT_MIN_SPAN 16u
#endif
#define ATTN_MAX_SPLITS 512u
#define ATTN_SPLIT_BLOCK 16u
#define ATTN_SPLIT_KEYS_PER_SIMDGROUP 2u
#define ATTN_SPLIT_KEYS_PER_THREAD 4u
#define ATTN_SPLIT_MAX_HEAD_DIM 256u
// The DeltaNet kernel keeps a value head's state in registers, four threads per column (a quarter of
// the keys each): key_dim <= DELTANET_MAX_KEY_DIM and a multiple of 4, value_dim a multiple of 8 and,
// when the state norm is traced (the whole head in one threadgroup), <= DELTANET_MAX_VALUE_DIM.
#define DELTANET_MAX_KEY_DIM 128u
#define DELTANET_MAX_VALUE_DIM 128
#define DELTANET_MAX_THREADS 512
// deltanet_tokens (prompts, n > 1): tokens staged per block in threadgroup memory (an even count: the steps
// take two tokens from an even one); lanes per column of the state (DELTANET_MAX_KEY_DIM / DELTANET_PARTS
// keys each) and columns per lane: the kernel is bound by its threadgroup-memory reads and shuffles, so 8
// lanes of 2 columns each share each staged k and q read between two columns and eight sums between one
// set of shuffles; simdgroups per threadgroup, so columns per threadgroup. deltanet_prep runs on
// DELTANET_TOKENS_THREADS too.
#define DELTANET_BLOCK 16u
#define DELTANET_PARTS 8u
#define DELTANET_LANE_COLUMNS 2u
#define DELTANET_TOKENS_SIMDGROUPS 4u
#define DELTANET_TOKENS_THREADS 128  // DELTANET_TOKENS_SIMDGROUPS * 32, as a literal for the kernels' attribute
#define DELTANET_TOKENS_COLUMNS (DELTANET_TOKENS_SIMDGROUPS * 32u / DELTANET_PARTS * DELTANET_LANE_COLUMNS)
// The router runs one simdgroup per token, ROUTER_MAX_EXPERTS / 32 experts per lane (a multiple of 32);
// ROUTER_MAX_K / 32 chosen probabilities per lane.
#define ROUTER_MAX_EXPERTS 512u
#define ROUTER_MAX_K 64u
// The causal conv keeps the last kernel-1 inputs per channel in registers.
#define CONV_MAX_KERNEL 16u
// DeltaNet prefill: the token-parallel conv computes CONV_TOKENS tokens per thread.
#ifndef CONV_TOKENS
#define CONV_TOKENS 16u
#endif
// Threads of the row-reduction kernels (rms_norm, argmax, router, attention).
#define REDUCE_THREADS 256
// Logits per threadgroup of the arg-max's first pass.
#define ARGMAX_PART_LEN 2048u
#define ELEMENTWISE_THREADS 256

// One matrix, or a stack of experts, as uploaded: rows of `row_bytes` (a multiple of 16), expert e at
// e * rows * row_bytes; scales and biases [experts, rows, cols / group_size].
struct WeightDesc {
  uint format;
  uint group_size;
  uint scale_type;
  uint row_bytes;
  uint scale_row_bytes;
  uint rows;
  uint cols;
  uint group_shift;  // quantized: log2(4-byte words per group), so that a word's group is word >> group_shift
  uint row_word_shift;  // log2(4-byte words per row) when that is a power of two, else ROW_WORDS_ANY
};
#define ROW_WORDS_ANY 0xffffffffu

#define GEMV_MAX_JOBS 4u

// out_j[t, r] = W_j[r] · x[t] for up to four matrices that read the same input (fused projections).
// The blocks of GEMV_ROWS rows of all jobs are numbered consecutively; job j's start at first_block[j].
struct GemvParams {
  WeightDesc w[GEMV_MAX_JOBS];
  uint first_block[GEMV_MAX_JOBS];
  uint jobs;
  uint n;     // tokens
  uint cols;  // of every matrix, and the row stride of x
  uint total_blocks;
  uint x_vec4;  // x is 16-byte aligned (then read with vector loads)
  uint split;   // simdgroups per block of rows: 1, 2, 4 ... GEMV_SIMDGROUPS
};

// The tiled form of GemvParams (n >= PREFILL_MIN_TOKENS): the row tiles of all jobs are numbered
// consecutively, job j's from first_tile[j]; grid (total_tiles, ceil(n / tile tokens)), the tiles
// of gemm (GEMM_TILE_*) or gemm_wide (GEMM_WIDE_TILE).
struct GemmParams {
  WeightDesc w[GEMV_MAX_JOBS];
  uint first_tile[GEMV_MAX_JOBS];
  uint jobs;
  uint n;     // tokens
  uint cols;  // of every matrix; x: fp32 rows of cols (gemm_exact), half rows (gemm, gemm_wide: half_rows)
  uint total_tiles;
  uint parts;      // gemm_exact, gemm_q4_parts: the columns in `parts` parts of part_cols, summed by gemm_parts_sum
  uint part_cols;  // (parts > 1), so that a short chunk still fills the GPU
  uint tile_rows;  // rows per tile of the kernel that wrote the parts (gemm_parts_sum's layout)
};

// The tiled kernels' activations: fp32 rows [n, cols] rounded to half once (half_rows), each row
// zero-padded to a multiple of GEMM_K halfs (and so of GEMM_WIDE_K), so that a tile loader's run of 8
// columns is one 16-byte copy with no bounds test. With fragment_order, each 64-column block is stored
// in q4_fragment_column order (the `_q4` kernels' tiles, shaders/tiles.h), so that their tile copies
// are plain 16-byte copies too. One thread per run of 8 halfs.
#define HALF_ROWS_THREADS 256
#define HALF_ROW_LD(cols) (((cols) + GEMM_K - 1u) / GEMM_K * GEMM_K)  // halfs per padded row
struct HalfRowsParams {
  uint n;     // rows
  uint cols;  // fp32 values per row of x
  uint fragment_order;  // 1: each 64-column block in q4_fragment_column order
};

// out[t] = the embedding row ids[t], dequantized.
struct EmbedParams {
  WeightDesc w;
  uint n;
};

// MoE experts of one token row: h[t, s] = silu(gate_e · x) * (up_e · x), out[t] = Σ_s weight · down_e · h,
// plus, when `shared`, the gated shared expert: shared_scale · sigmoid(gate_logit[t]) · sdown · sh[t]
// with sh[t] = silu(sgate · x) * (sup · x) (computed as slot k of moe_gate_up).
struct MoeParams {
  WeightDesc gate;
  WeightDesc up;
  WeightDesc down;
  WeightDesc sgate;
  WeightDesc sup;
  WeightDesc sdown;
  uint n;
  uint k;
  uint hidden;
  uint inter;
  uint x_vec4;  // x is 16-byte aligned
  uint h_vec4;  // the intermediate rows are 16-byte aligned
  uint shared;
  uint shared_inter;
  float shared_scale;
  uint sh_vec4;  // the shared intermediate rows are 16-byte aligned
  uint split;    // moe_down: simdgroups per block of output rows
  uint x_int16;  // moe_gate_up: x read as int16 blocks (xq, de: the fp16 precision's rows_dot_int16)
};

// MoE prefill's counting sort (moe_bucket_count, _scan, _scatter): entries counted and ranked in blocks
// of MOE_BUCKET_BLOCK (a thread per expert walks each of up to MOE_BUCKET_PARTS parts of a block, at
// most MOE_BUCKET_THREADS threads), the [expert, block] counts scanned by one threadgroup of
// MOE_SCAN_THREADS (32 simdgroups), MOE_SCAN_PER_THREAD counts per thread per round.
#define MOE_BUCKET_BLOCK 512u
#define MOE_BUCKET_PARTS 4u
#define MOE_BUCKET_THREADS 1024
// The affine tiled MoE kernels' `_short` build: tiles of MOE_SHORT_TILE_TOKENS bucket rows, for chunks
// of at most that many (token, slot) entries per expert on average (512 tokens x 8 / 256 experts = 16).
#define MOE_SHORT_TILE_TOKENS 32u
// gemm_q4 and the `_q4` builds of the MoE kernels (MLX 4-bit weights in groups of 64, rows a multiple
// of 8): threadgroups of GEMM_THREADS take Q4_TILE_ROWS weight rows (32 per simdgroup, read straight into
// its fragments: simdgroup_q4_load), or Q4_GATE_UP_TILE_ROWS rows of both the gate and the up (16 of each
// per simdgroup), and GEMM_TILE_TOKENS tokens (MOE_SHORT_TILE_TOKENS bucket rows for the `_q4_short`
// builds); the rows' scales and biases are staged Q4_SCALE_GROUPS groups at a time.
#define Q4_TILE_ROWS 128u
#define Q4_GATE_UP_TILE_ROWS 64u
#define Q4_SCALE_GROUPS 8u
// Groups of scales one thread of stage_q4_scales reads from a row at once (8 or 16 bytes).
#define Q4_SCALE_RUN 4u
// moe_tile_list: one threadgroup of MOE_TILE_LIST_THREADS, MOE_TILE_LIST_PER_THREAD buckets per thread.
// MOE_HALF_TILE marks a listed tile that holds at most half its rows (tiles of a bucket are numbered
// below it).
#define MOE_HALF_TILE 0x8000u
#define MOE_TILE_LIST_THREADS 512
#define MOE_TILE_LIST_PER_THREAD 2u
#define MOE_SCAN_THREADS 1024
#define MOE_SCAN_PER_THREAD 4u
// moe_bucket_small: chunks of at most MOE_BUCKET_SMALL_ENTRIES entries and MOE_BUCKET_SMALL_EXPERTS
// experts bucketed, and their tiles listed, by one threadgroup of MOE_BUCKET_SMALL_THREADS (32
// simdgroups; 4 threads per expert scan its counts per simdgroup: [256][32] ushorts, 16 KiB).
#define MOE_BUCKET_SMALL_ENTRIES 4096u
#define MOE_BUCKET_SMALL_EXPERTS 256u
#define MOE_BUCKET_SMALL_THREADS 1024

// MoE prefill (tiled(n)): the n·k (token, slot) entries bucketed by expert (moe_bucket), grouped GEMMs
// over the buckets (moe_gate_up_tiled, moe_down_tiled; the shared expert, when `shared`, is bucket
// `experts`, holding every token) and the combine in slot order (moe_combine).
struct MoeTiledParams {
  WeightDesc gate;
  WeightDesc up;
  WeightDesc down;
  WeightDesc sgate;
  WeightDesc sup;
  WeightDesc sdown;
  uint n;
  uint k;
  uint experts;
  uint hidden;
  uint shared;
  float shared_scale;
  uint tile_tokens;  // bucket rows per tile of the expert kernels (moe_tile_list)
};

struct RouteParams {
  uint n;
  uint experts;
  uint k;
  uint renormalize;
  uint has_bias;
  uint has_probs;
};

// int16: the norm kernels also store their output quantised as quantize_int16 does (dim a multiple of
// INT16_BLOCK), so that the fp16 precision's GEMVs read it without a launch of their own.
struct NormParams {
  uint rows;
  uint dim;
  float eps;
  uint has_weight;
  uint int16;
};

struct AddNormParams {
  uint rows;
  uint dim;
  float eps;
  uint has_weight;
  float scale;  // of the added rows
  uint int16;
};

struct ConvParams {
  uint n;
  uint channels;
  uint kernel;
};

struct DeltaNetParams {
  uint n;
  uint key_heads;
  uint value_heads;
  uint key_dim;
  uint value_dim;
  float eps;
  uint trace_beta;
  uint trace_decay;
  uint trace_norm;
};

// attention_prep's store of k and v into the KV cache rows: none, fp32 rows, or half rows.
#define KV_STORE_NONE 0u
#define KV_STORE_F32 1u
#define KV_STORE_F16 2u
struct AttentionPrepParams {
  uint n;
  uint pos0;
  uint heads;
  uint kv_heads;
  uint head_dim;
  uint rotary_dim;
  uint gated;
  float rope_theta;
  float eps;
  uint store;  // KV_STORE_*
};

// Split-K attention (flash-decoding): partial results per (token, head, split of `span` key positions),
// merged by attention_combine (or written as the output by attention_partial when splits == 1). One
// launch covers the `n` tokens t0 .. t0+n-1 of a call of `n_call` tokens at positions
// pos0 .. pos0+n_call-1 (the host splits long prefills so that the partials stay small).
struct AttentionParams {
  uint n;
  uint t0;
  uint n_call;
  uint pos0;
  uint heads;
  uint kv_heads;
  uint head_dim;
  uint splits;
  uint span;  // key positions per split, a multiple of ATTN_SPLIT_BLOCK
  float scale;
  uint gated;  // the output is multiplied by sigmoid(gate)
  uint int16;  // attention_combine also writes the output as int16 blocks (xq, de; head_dim a multiple of INT16_BLOCK)
};

// Decode attention at the fp16 precision (attention_half.metal: attention_partial_half_32, _64, _128,
// _256): ATTN_HALF_SIMDGROUPS simdgroups per span, each a slice of the head dimensions, over blocks of
// ATTN_HALF_KEYS keys (the 16 rows of an m16n8k16 product: ATTN_SPLIT_BLOCK, so that spans are whole
// blocks) for up to ATTN_HALF_GROUP query heads per KV head (the product's 8 columns).
#define ATTN_HALF_SIMDGROUPS 4u
#define ATTN_HALF_THREADS 128  // ATTN_HALF_SIMDGROUPS * 32, as a literal for the kernels' attribute
#define ATTN_HALF_KEYS 16u
#define ATTN_HALF_GROUP 8u
#define ATTN_HALF_MAX_HEAD_DIM 256u
#define ATTN_HALF_MAX_SLICE 64u  // ATTN_HALF_MAX_HEAD_DIM / ATTN_HALF_SIMDGROUPS

// Prefill attention (attention_prefill.metal): a threadgroup of ATTN_PREFILL_SIMDGROUPS simdgroups takes
// ATTN_PREFILL_SIMDGROUP_ROWS query rows per simdgroup ((token, query head) pairs of one KV head) against
// key tiles of 16 (head dim 256) or 32 keys; head dims 32, 64, 128 and 256. The queries are staged in
// passes of at most ATTN_PREFILL_QUERY_COLUMNS columns, the outputs written in passes of at most
// ATTN_PREFILL_OUT_COLUMNS; ATTN_PREFILL_RESCALE (log2 units) bounds the
// lazily rescaled softmax weights.
#define ATTN_PREFILL_SIMDGROUPS 4u
#define ATTN_PREFILL_THREADS 128        // ATTN_PREFILL_SIMDGROUPS * 32, as a literal for the kernels' attribute
#define ATTN_PREFILL_SIMDGROUP_ROWS 16u  // the 16 rows of an m16n8k16 product
#define ATTN_PREFILL_ROWS 64u           // ATTN_PREFILL_SIMDGROUP_ROWS * ATTN_PREFILL_SIMDGROUPS
#define ATTN_PREFILL_MAX_HEAD_DIM 256u
#define ATTN_PREFILL_MAX_KEYS 32u
#define ATTN_PREFILL_QUERY_COLUMNS 128u
#define ATTN_PREFILL_OUT_COLUMNS 64u
#define ATTN_PREFILL_RESCALE 8.0f
// A head-dim-256 launch of fewer than ATTN_PREFILL_HALVES_BELOW threadgroups (query tiles x KV heads: 128
// at 512 tokens of the 35B) runs attention_prefill_256_halves, twice the threadgroups on half the value
// dimensions each.
#define ATTN_PREFILL_HALVES_BELOW 256u

// Causal prefill attention of the n tokens at positions pos0 .. pos0+n-1 of one call: grid (tiles,
// kv_heads), tiles = ceil(n * group / ATTN_PREFILL_ROWS).
struct AttentionPrefillParams {
  uint n;
  uint pos0;
  uint heads;
  uint kv_heads;
  uint group;   // heads / kv_heads
  uint tiles;
  float scale;  // 1/sqrt(head_dim) · log2(e): the kernel's exponentials are exp2
  uint gated;   // out *= sigmoid(gate)
};

struct ElementwiseParams {
  uint count;
  float scale;
  uint value;  // fill: the 32-bit pattern
};

// Arg-max in two passes: `parts` slices of `part_len` logits per row, then one pass over the slices.
struct ArgmaxParams {
  uint n;
  uint vocab;
  uint parts;
  uint part_len;
};

#endif
