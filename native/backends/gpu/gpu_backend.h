// The GPU backend: the Backend interface implemented with the kernels of shaders/*.metal over a
// Runtime (Metal, CUDA, or the CPU emulator). Activations and state are fp32, as in the CPU backend
// (the reference) and as backend.h's buffers are; weights stay in their stored format (MLX 4/8-bit
// or dense bf16/f16/f32) and are dequantised inside the kernels.
//
// Everything between two host reads is recorded into one submission (one Metal command buffer; one
// CUDA stream segment, captured as a graph): write() during recording goes through a staging buffer
// and a copy kernel, and buffers freed during recording live until the work is done.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../../core/backend.h"
#include "kernels.h"
#include "runtime.h"

namespace moelens::gpu {

class GpuBackend;

class GpuBuffer final : public Buffer {
 public:
  GpuBuffer(GpuBackend& owner, ElemType type, size_t count);
  ~GpuBuffer() override;
  DeviceBuffer* device() const { return device_; }

 private:
  GpuBackend& owner_;
  DeviceBuffer* device_;
};

class GpuWeight final : public Weight {
 public:
  shader::WeightDesc desc{};
  int64_t experts = 0;
  std::unique_ptr<GpuBuffer> data, scales, biases;  // scales/biases only when quantized
  // Every scale and bias is exact as a half (zero or normal): the 4-bit tiles that dequantise with half
  // arithmetic (the `_q4` kernels) may take the matrix.
  bool scales_exact_in_half = false;
};

// Whether the `_q4` tiled kernels (4-bit weights read straight into the matrix units' fragments and
// dequantised in half arithmetic: shaders/tiles.h) take a matrix: MLX 4-bit in groups of 64 (a group
// per K-step), whole 8-row blocks, every scale and bias exact in half.
inline bool q4_tiles_take(const GpuWeight& w) {
  const shader::WeightDesc& d = w.desc;
  return d.format == WEIGHT_Q4 && d.group_size == 64 && d.rows % 8 == 0 && d.cols % GEMM_K == 0 && w.scales_exact_in_half;
}

// Whether the fp16 precision's integer GEMVs (rows_dot_int16: gemv_int16, moe_gate_up_int16) take a matrix or
// an expert stack: MLX 4-bit rows with bf16 scales in groups of whole INT16_BLOCK blocks.
inline bool int16_takes(const GpuWeight& w) {
  const shader::WeightDesc& d = w.desc;
  return d.format == WEIGHT_Q4 && d.scale_type == SCALE_BF16 && d.group_size % INT16_BLOCK == 0 && d.cols % INT16_BLOCK == 0;
}

// Whether the fp16 precision's exact GEMV on the matrix units (gemv_exact_q4) takes a matrix: MLX 4-bit
// in groups of 64 with bf16 scales, whole 8-row blocks.
inline bool exact_q4_takes(const GpuWeight& w) {
  const shader::WeightDesc& d = w.desc;
  return d.format == WEIGHT_Q4 && d.scale_type == SCALE_BF16 && d.group_size == 64 && d.rows % 8 == 0 && d.cols % 64 == 0 &&
         !w.experts;
}

// How prefill chunks multiply: F32 (what load() gives by default) runs every call on the exact fp32
// kernels that decode uses; F16 (reduced precision; the constructor's default, which the kernel tests
// use) runs chunks of at least PREFILL_MIN_TOKENS tokens (shaders/params.h) on the tiled kernels:
// activations and dequantised weights enter the matrix units as fp16, with fp32 accumulation; shorter
// calls multiply 4-bit weights with bf16 scales on int16 activations (gemv_int16, moe_gate_up_int16).
enum class Precision { F32, F16 };
bool parse_precision(const std::string& name, Precision* out);  // "fp32", "fp16"

class GpuBackend final : public Backend {
 public:
  explicit GpuBackend(std::unique_ptr<Runtime> runtime, Precision precision = Precision::F16);
  ~GpuBackend() override;
  const char* name() const override { return runtime_->name(); }
  const char* precision_name() const override { return precision_ == Precision::F16 ? "fp16" : "fp32"; }
  Precision precision() const { return precision_; }
  void set_precision(Precision p) { precision_ = p; }
  int default_prefill_chunk() const override { return int(PREFILL_CHUNK); }
  // Whether a call of n tokens runs on the tiled prefill kernels: at fp16, from PREFILL_MIN_TOKENS tokens
  // (the measured crossover) unless set otherwise (to measure it, or to run a short prompt on them).
  bool tiled(int n) const { return precision_ == Precision::F16 && n >= prefill_min_tokens_; }
  void set_prefill_min_tokens(int n) { prefill_min_tokens_ = n; }
  // Head-dim-256 prompt attention on value halves below this many threadgroups (ATTN_PREFILL_HALVES_BELOW;
  // the kernel checks set it to reach both builds with small shapes).
  void set_attention_halves_below(size_t threadgroups) { attention_halves_below_ = threadgroups; }
  // Chunks of at most this many (token, slot) entries bucket in one launch (moe_bucket_small; at most
  // MOE_BUCKET_SMALL_ENTRIES, the default; the kernel checks set 0 to reach the four launches with small
  // shapes).
  void set_moe_bucket_small_entries(uint32_t entries) {
    moe_bucket_small_entries_ = std::min(entries, MOE_BUCKET_SMALL_ENTRIES);
  }
  Runtime& runtime() { return *runtime_; }

  std::unique_ptr<Buffer> alloc(ElemType type, size_t count) override;
  std::unique_ptr<Buffer> upload(const std::vector<float>& values) override;
  std::unique_ptr<Weight> upload(const LinearWeight& w) override;
  void write(View dst, const void* src, size_t count) override;
  void read(View src, void* dst, size_t count) override;
  void copy(View dst, View src, size_t count) override;
  void fill(View dst, float value, size_t count) override;
  void synchronize() override;
  void flush() override;
  void begin_chunk(int n) override;

  void embed(const Weight& table, View ids, int n, View out) override;
  void rms_norm(View x, View weight, int rows, int dim, float eps, View out) override;
  void add(View a, View b, size_t count, float scale) override;
  void scale(View x, float scale, size_t count) override;
  void matmul(const Weight& w, View x, int n, View out) override;
  void matmul_group(const std::vector<MatmulJob>& jobs, View x, int n) override;

  void conv_silu(View x, View state, View weights, int n, int channels, int kernel, View out) override;
  void deltanet(View qkv, View b, View a, View A_log, View dt_bias, View state, int n, const DeltaNetShape& s,
                View out, const DeltaNetTrace& trace) override;
  void gated_rms_norm(View x, View z, View weight, int rows, int dim, float eps, View out) override;

  // F16 where the fp16 precision's attention kernels take the shape (they round keys and values to half).
  ElemType kv_cache_type(const AttentionShape& s) const override;
  void attention_prep(View qg, View k, View v, View q_norm, View k_norm, int n, int pos0, const AttentionShape& s,
                      View q, View gate, View k_rows, View v_rows) override;
  void attention(View q, View k_cache, View v_cache, int n, int pos0, const AttentionShape& s, View out,
                 View probs, View gate) override;

  void route(View logits, View bias, int n, int experts, int k, bool renormalize, View ids, View weights,
             View probs) override;
  void moe_experts(const Weight& gate, const Weight& up, const Weight& down, View x, View ids, View weights, int n,
                   int k, View out, const SharedExpert& shared) override;
  void argmax(View logits, int rows, int vocab, View ids) override;

  // The MoE prefill's counting sort of the n·k entries of `ids` [n, k] (entry t·k + s) by expert, in
  // entry order within each expert: offsets [experts + 1] (expert e's bucket is entries[offsets[e] ..
  // offsets[e+1]]), entries [n·k] (entry indices in bucket order), positions [n·k] (each entry's place
  // in `entries`). Ids outside 0 .. experts-1 are in no bucket (their positions are left as they were).
  // Then the buckets' tiles of tile_tokens rows, the shared expert's bucket (every token) last when
  // `shared`, for the expert kernels (moe_tile_list): tiles [1 + ceil(n·k / tile_tokens) + experts +
  // (shared ? ceil(n / tile_tokens) : 0)], their number first.
  void bucket_by_expert(View ids, int n, int k, int experts, bool shared, uint32_t tile_tokens, View offsets,
                        View entries, View positions, View tiles);

  // Kernel launches recorded since this backend was made, in all and by kernels::Id (for reports:
  // launches per token; and for the kernel tests: which kernels a case ran).
  uint64_t dispatch_count() const { return dispatches_; }
  const std::vector<uint64_t>& dispatches_by_kernel() const { return by_kernel_; }
  uint64_t fencing_dispatches() const { return fencing_; }  // with Dispatch::fences_next

 private:
  static bool scales_exact_in_half(const LinearWeight& w);
  friend class GpuBuffer;
  class Call;
  // Locks the backend and dispatches a deferred add (every call but rms_norm() starts here).
  std::unique_lock<std::recursive_mutex> enter();
  void flush_add();
  // Records a launch; int16_form_ is forgotten when the launch may write (kernels.h's
  // written_mask) the buffer of its output.
  void submit(const Dispatch& d);
  // copy(), or with fences_next the copy of a staged host write (Dispatch::fences_next).
  void record_copy(View dst, View src, size_t count, bool fences_next);
  void release(DeviceBuffer* b);
  void finish_locked();
  void scratch(std::unique_ptr<GpuBuffer>& slot, size_t floats);  // grows an internal scratch buffer
  void gemv_jobs(const MatmulJob* jobs, size_t count, View x, int n);
  // fp16, calls that tiled(n) leaves: x quantised once into int16_x_ (quantize_int16), then every job
  // (int16_takes) on gemv_int16.
  void gemv_int16_jobs(const MatmulJob* jobs, size_t count, View x, int n);
  // x [n, cols] as int16 blocks (xq; de the blocks' (d, d · Σq)): int16_form_'s blocks when x is the
  // output they are the form of, else quantize_int16 into int16_x_.
  View int16_rows(View x, int n, uint32_t cols, View& de);
  // Whether an op's kernel that writes count values in rows of dim also writes them as int16 blocks (fp16
  // decode: the norms, the attention's combine), and where (xq, de): int16_form_ then describes them.
  bool writes_int16_form(size_t count, int dim, View& xq, View& de);
  // count values as int16 blocks in one buffer: their words (count / 2 floats' room), then each block's
  // (d, d · Σq). The buffer's size in floats, and where the pairs start.
  static size_t int16_floats(size_t count) { return count / 2 + count / INT16_BLOCK * 2; }
  static View int16_scales(GpuBuffer* blocks, size_t count) { return View(blocks, count / 2); }
  // int16_form_'s output is no longer what its blocks hold once b may have been written.
  void forget_int16_form(const DeviceBuffer* b);
  // tiled(n); xh from half_rows, in fragment order for q4 (every job q4_tiles_take: gemm_q4).
  void gemm_jobs(const MatmulJob* jobs, size_t count, View xh, int n, bool q4);
  void gemm_exact_jobs(const MatmulJob* jobs, size_t count, View x, int n);  // tiled(n), exact jobs: fp32
  void gemv_exact_q4_job(const MatmulJob& job, View x, int n);  // fp16, an exact job that exact_q4_takes
  // gemm_parts_sum: the parts a split gemm_exact or gemm_q4_parts left in gemm_parts_, into the jobs' outputs.
  void sum_parts(const MatmulJob* jobs, size_t count, const shader::GemmParams& p, size_t padded);
  // x [n, cols] rounded to half into half_x_ (the half_rows kernel): the tiled kernels' activations,
  // each 64-column block in q4_fragment_column order with fragment_order (what the `_q4` kernels read).
  View half_rows(View x, int n, uint32_t cols, bool fragment_order);
  void moe_experts_tiled(const GpuWeight& gate, const GpuWeight& up, const GpuWeight& down, View x, View ids,
                         View weights, int n, int k, View out, const SharedExpert& shared);

  std::unique_ptr<Runtime> runtime_;  // first, with mu_ before the buffers: destroyed after them (~GpuBackend)
  Precision precision_;
  int prefill_min_tokens_ = int(PREFILL_MIN_TOKENS);
  size_t attention_halves_below_ = ATTN_PREFILL_HALVES_BELOW;
  uint32_t moe_bucket_small_entries_ = MOE_BUCKET_SMALL_ENTRIES;
  std::recursive_mutex mu_;
  bool pending_ = false;                       // work recorded since the last finish
  bool prompt_ = false;                        // the chunk being recorded has prefill_min_tokens or more
  std::vector<DeviceBuffer*> graveyard_;       // freed while pending; destroyed after the finish
  std::unique_ptr<GpuBuffer> dummy_;           // bound where a kernel's optional buffer is absent
  // internal scratch, grown on demand
  std::unique_ptr<GpuBuffer> moe_h_, moe_shared_h_, attn_ml_, attn_o_, attn_lse_, attn_k32_, attn_v32_, argmax_parts_;
  // MoE prefill: bucket offsets, entries in bucket order, each entry's position, the experts' outputs
  std::unique_ptr<GpuBuffer> moe_offsets_, moe_entries_, moe_positions_, moe_y_, moe_shared_y_;
  std::unique_ptr<GpuBuffer> moe_bucket_counts_;  // the counting sort's [expert, block] counts, then first positions
  std::unique_ptr<GpuBuffer> moe_tiles_;          // moe_tile_list: the number of the buckets' tiles, then each tile
  std::unique_ptr<GpuBuffer> half_x_;             // half_rows' output, read by the tiled kernels of one call
  std::unique_ptr<GpuBuffer> int16_x_;            // quantize_int16's output, read by gemv_int16 in one call
  // fp16 decode: the last output that its kernel also wrote as int16 blocks (a norm's, the attention's
  // combine), for the GEMVs that read it next (the projections, the experts' gate and up) in place of
  // quantize_int16.
  struct Int16Form {
    View out;  // the fp32 output
    size_t count = 0;
    bool valid = false;
  } int16_form_;
  std::unique_ptr<GpuBuffer> int16_form_buf_;  // its int16 words, then the blocks' (d, d · Σq)
  std::unique_ptr<GpuBuffer> gemm_parts_;         // a split GEMM's sums per part of the columns (gemm_parts_sum)
  // DeltaNet prompts: deltanet_prep's normalised q and k rows and gates, read by deltanet_tokens
  std::unique_ptr<GpuBuffer> deltanet_qk_, deltanet_gates_;
  // The last add(), not yet dispatched: when the next call is the rms_norm of the same rows (the
  // session's residual add then the next norm), both run as one add_rms_norm launch.
  struct PendingAdd {
    View a, b;
    size_t count = 0;
    float scale = 1.0f;
    bool active = false;
  } add_;
  uint64_t dispatches_ = 0, fencing_ = 0;
  std::vector<uint64_t> by_kernel_ = std::vector<uint64_t>(kernels::kCount, 0);
};

}  // namespace moelens::gpu
