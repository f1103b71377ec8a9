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

// Threads of the GEMV-class kernels: one simdgroup per output row, four rows per threadgroup.
#define ROWS_PER_THREADGROUP 4u
#define GEMV_THREADS 128
// The attention kernels' limits: query heads per KV head, head_dim, key positions per threadgroup.
#define ATTN_MAX_GROUP 16u
#define ATTN_MAX_HEAD_DIM 512u
#define ATTN_MAX_QUERY_FLOATS 4096u
#define ATTN_CHUNK 64u
// The DeltaNet kernel keeps one column of a value head's state in registers (key_dim <= this), one
// thread per column (value_dim <= DELTANET_MAX_VALUE_DIM).
#define DELTANET_MAX_KEY_DIM 128u
#define DELTANET_MAX_VALUE_DIM 128
// The router keeps every expert's probability in threadgroup memory.
#define ROUTER_MAX_EXPERTS 1024u
#define ROUTER_MAX_K 64u
// The causal conv keeps the last kernel-1 inputs per channel in registers.
#define CONV_MAX_KERNEL 16u
// Threads of the row-reduction kernels (rms_norm, argmax, router, attention).
#define REDUCE_THREADS 256
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
  uint pad;
};

#define GEMV_MAX_JOBS 4u

// out_j[t, r] = W_j[r] · x[t] for up to four matrices that read the same input (fused projections).
struct GemvParams {
  WeightDesc w[GEMV_MAX_JOBS];
  uint jobs;
  uint n;     // tokens
  uint cols;  // of every matrix, and the row stride of x
  uint total_rows;
  uint x_vec4;  // x is 16-byte aligned (then read with vector loads)
};

// out[t] = the embedding row ids[t], dequantized.
struct EmbedParams {
  WeightDesc w;
  uint n;
};

// MoE experts of one token row: h[t, s] = silu(gate_e · x) * (up_e · x), out[t] = Σ_s weight · down_e · h.
struct MoeParams {
  WeightDesc gate;
  WeightDesc up;
  WeightDesc down;
  uint n;
  uint k;
  uint hidden;
  uint inter;
  uint x_vec4;  // x is 16-byte aligned
  uint h_vec4;  // the intermediate rows are 16-byte aligned
};

struct RouteParams {
  uint n;
  uint experts;
  uint k;
  uint renormalize;
  uint has_bias;
  uint has_probs;
};

struct NormParams {
  uint rows;
  uint dim;
  float eps;
  uint has_weight;
};

struct AddNormParams {
  uint rows;
  uint dim;
  float eps;
  uint has_weight;
  float scale;  // of the added rows
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
};

// Decode/prefill attention split over chunks of ATTN_CHUNK key positions (flash-decoding): partial
// results per (token, head, chunk), merged by attention_combine. One launch covers the `n` tokens
// t0 .. t0+n-1 of a call of `n_call` tokens at positions pos0 .. pos0+n_call-1 (the host splits long
// prefills so that the partials stay small).
struct AttentionParams {
  uint n;
  uint t0;
  uint n_call;
  uint pos0;
  uint heads;
  uint kv_heads;
  uint head_dim;
  uint chunks;
  float scale;
};

struct ElementwiseParams {
  uint count;
  float scale;
  uint value;  // fill: the 32-bit pattern
};

struct AddGatedParams {
  uint n;
  uint dim;
  float scale;
};

struct ArgmaxParams {
  uint n;
  uint vocab;
};

#endif
