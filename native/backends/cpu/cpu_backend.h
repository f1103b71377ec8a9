// The CPU backend: the numerical reference for every other backend. Activations and state are fp32;
// weights stay in the checkpoint's mapped memory in their stored format.
#pragma once

#include <memory>
#include <vector>

#include "../../core/backend.h"
#include "gemm.h"
#include "int8.h"
#include "thread_pool.h"

namespace moelens {

class CpuBuffer final : public Buffer {
 public:
  CpuBuffer(ElemType type, size_t count);
  float* f32() { return reinterpret_cast<float*>(data_.get()); }
  int32_t* i32() { return reinterpret_cast<int32_t*>(data_.get()); }

 private:
  std::unique_ptr<uint32_t[]> data_;
};

class CpuWeight final : public Weight {
 public:
  explicit CpuWeight(const LinearWeight& w) : w(w) {}
  LinearWeight w;
};

class CpuBackend final : public Backend {
 public:
  // precision: how quantised (MLX 4/8-bit) matmuls treat their activations: fp32 (exact, the default and
  // the reference), int24 (integer dot products in decode, within the same parity tests), or int8 / int16
  // (opt-in, reduced precision, integer dot products; see int8.h).
  // Dense weights are always fp32.
  explicit CpuBackend(int threads = 0, cpu::Precision precision = cpu::Precision::F32);
  const char* name() const override { return "cpu"; }
  int threads() const { return pool_.size(); }
  cpu::Precision precision() const { return precision_; }
  const char* precision_name() const override { return cpu::precision_name(precision_); }
  void set_precision(cpu::Precision p) { precision_ = p; }

  std::unique_ptr<Buffer> alloc(ElemType type, size_t count) override;
  std::unique_ptr<Buffer> upload(const std::vector<float>& values) override;
  std::unique_ptr<Weight> upload(const LinearWeight& w) override;
  void write(View dst, const void* src, size_t count) override;
  void read(View src, void* dst, size_t count) override;
  void copy(View dst, View src, size_t count) override;
  void fill(View dst, float value, size_t count) override;
  void synchronize() override {}

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

  void attention_prep(View qg, View k, View v, View q_norm, View k_norm, int n, int pos0, const AttentionShape& s,
                      View q, View gate, View k_rows, View v_rows) override;
  void attention(View q, View k_cache, View v_cache, int n, int pos0, const AttentionShape& s, View out,
                 View probs, View gate) override;

  void route(View logits, View bias, int n, int experts, int k, bool renormalize, View ids, View weights,
             View probs) override;
  void moe_experts(const Weight& gate, const Weight& up, const Weight& down, View x, View ids, View weights, int n,
                   int k, View out, const SharedExpert& shared) override;
  void argmax(View logits, int rows, int vocab, View ids) override;

 private:
  // y[n, rows] = x[n, cols] · W_eᵀ for expert e (0 for plain matrices).
  struct LinearJob {
    const LinearWeight* w;
    int64_t expert;
    float* y;
  };
  void linear(const LinearWeight& w, int64_t expert, const float* x, int n, float* y) { linear_shared({{&w, expert, y}}, x, n); }
  // Several weights against the same x: x is quantised (int8 precision) or packed for the prefill tiles
  // once per layout, not once per weight.
  void linear_shared(const std::vector<LinearJob>& jobs, const float* x, int n);
  void linear_packed(const LinearWeight& w, int64_t expert, const cpu::PackedTokens& x, float* y);
  // Whether `w`'s matmul over n activation rows runs on the integer kernels (int8.h). int24 takes them
  // for one row only (decode): with three planes its prefill tiles are no faster than the fp32 ones,
  // which are exact.
  bool int8(const LinearWeight& w, int n) const {
    return precision_ != cpu::Precision::F32 && cpu::int8_supported(w) && (precision_ != cpu::Precision::Int24 || n == 1);
  }
  int planes() const { return cpu::activation_planes(precision_); }
  void quantize(const LinearWeight& w, const float* x, int n, cpu::Int8Input* in);
  // One call's activations quantised per weight layout. A call site keeps one per thread and clears it
  // per call: the entries and their buffers stay allocated, so decode does not allocate them per matmul.
  struct QuantizedInputs {
    std::vector<std::unique_ptr<cpu::Int8Input>> entries;
    size_t used = 0;
  };
  // x quantised for w: the entry of `q` that fits w's layout, else the next free entry, filled (int8
  // precisions quantise once per layout and share it among the weights of that layout).
  const cpu::Int8Input& quantized_for(const LinearWeight& w, const float* x, int n, QuantizedInputs* q);
  void linear_int8(const LinearWeight& w, int64_t expert, const cpu::Int8Input& in, float* y);
  // Several tokens: the (token, slot) pairs grouped by expert, so each expert's weights are read once.
  void moe_experts_grouped(const LinearWeight& G, const LinearWeight& U, const LinearWeight& D, const float* x,
                           const int32_t* ids, const float* weights, int n, int k, float* out);
  // One token through its k experts and the shared expert, with two parallel loops (gate/up rows, then
  // down rows) over all of them.
  void moe_experts_one_token(const LinearWeight& G, const LinearWeight& U, const LinearWeight& D, const float* x,
                             const int32_t* ids, const float* weights, int k, const SharedExpert& shared, float* out);
  // out[t] += scale · sigmoid(gate_logit[t]) · shared expert(x[t]), in fp32 rows.
  void add_shared_expert(const SharedExpert& shared, const float* x, int n, float* out);
  ThreadPool pool_;
  cpu::Precision precision_;
};

// Iterations per parallel chunk so that each chunk carries at least ~32K multiply-adds: below that,
// handing work to another thread costs more than it saves (tiny models run single-threaded).
inline size_t grain_for(size_t work_per_iteration) {
  constexpr size_t kMinWork = 32768;
  return work_per_iteration >= kMinWork ? 1 : kMinWork / (work_per_iteration ? work_per_iteration : 1);
}

// Raw pointers of a view, for the kernels.
inline float* f32(View v) { return static_cast<CpuBuffer*>(v.buf)->f32() + v.offset; }
inline int32_t* i32(View v) { return static_cast<CpuBuffer*>(v.buf)->i32() + v.offset; }

}  // namespace moelens
