// The interface every compute backend implements (CPU now; Metal and CUDA follow the same shape).
//
// It is designed for GPUs: the model runs as a per-layer sequence of kernels over buffers the backend
// owns, and the host reads back nothing in the hot path but logits and the traces a caller asked for.
// Buffers hold 32-bit elements (F32 or I32), or halves (F16: a GPU's KV cache at its fp16 precision); a
// View is a buffer plus an element offset. All kernels take row counts `n` (tokens) so that one call
// serves prefill (many rows) and decode (one row).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "weights.h"

namespace moelens {

enum class ElemType { F32, I32, F16 };
inline size_t elem_bytes(ElemType t) { return t == ElemType::F16 ? 2 : 4; }

class Buffer {
 public:
  virtual ~Buffer() = default;
  ElemType type() const { return type_; }
  size_t count() const { return count_; }

 protected:
  Buffer(ElemType type, size_t count) : type_(type), count_(count) {}

 private:
  ElemType type_;
  size_t count_;
};

struct View {
  Buffer* buf = nullptr;
  size_t offset = 0;  // in elements
  View() = default;
  View(Buffer* b, size_t off = 0) : buf(b), offset(off) {}
  View(const std::unique_ptr<Buffer>& b, size_t off = 0) : buf(b.get()), offset(off) {}
  explicit operator bool() const { return buf != nullptr; }
  View at(size_t more) const { return View(buf, offset + more); }
};

// A weight matrix (or expert stack) resident on the backend.
class Weight {
 public:
  virtual ~Weight() = default;
};

struct DeltaNetShape {
  int key_heads, value_heads, key_dim, value_dim;
  float eps;  // of the q/k l2 normalisation
};

// Optional per-token outputs of the DeltaNet kernel, written only when their view is set.
struct DeltaNetTrace {
  View beta;        // [n, value_heads]
  View decay;       // [n, value_heads]: exp(g)
  View state_norm;  // [n, value_heads]: Frobenius norm of the state after the token
};

struct AttentionShape {
  int heads, kv_heads, head_dim, rotary_dim;
  bool gated;
  float rope_theta, eps;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // How activations enter the matmuls: "fp32" (exact) or a backend's faster mode (cpu: int24, int16,
  // int8; gpu: fp16, tensor-core prefill).
  virtual const char* precision_name() const { return "fp32"; }
  // Tokens per forward chunk of a long prompt: scratch memory is bounded by the chunk, and larger
  // chunks let a GPU read each expert's weights once for more tokens. 0 sets the backend's default.
  int prefill_chunk() const { return prefill_chunk_ > 0 ? prefill_chunk_ : default_prefill_chunk(); }
  void set_prefill_chunk(int tokens) { prefill_chunk_ = tokens; }

  // Memory. New buffers are zero-filled; counts are in elements of the buffer's type (write and read
  // move them as stored: an F16 element is a half's bits). copy converts between F32 and F16.
  virtual std::unique_ptr<Buffer> alloc(ElemType type, size_t count) = 0;
  virtual std::unique_ptr<Buffer> upload(const std::vector<float>& values) = 0;
  virtual std::unique_ptr<Weight> upload(const LinearWeight& w) = 0;
  virtual void write(View dst, const void* src, size_t count) = 0;
  virtual void read(View src, void* dst, size_t count) = 0;
  virtual void copy(View dst, View src, size_t count) = 0;
  virtual void fill(View dst, float value, size_t count) = 0;
  virtual void synchronize() = 0;
  // Starts the work recorded so far without waiting for it (a GPU runs it while the host records the
  // next step); reads and synchronize() wait as before. Nothing to do where work runs at once.
  virtual void flush() {}
  // A forward chunk of n tokens begins (its ops follow): a backend may launch a prompt's kernels
  // differently from a decode step's.
  virtual void begin_chunk(int n) { (void)n; }

  // out[n, hidden] = rows `ids` of the embedding table
  virtual void embed(const Weight& table, View ids, int n, View out) = 0;
  // out[r] = x[r] / rms(x[r]) * weight, over `rows` rows of `dim`; in place allowed
  virtual void rms_norm(View x, View weight, int rows, int dim, float eps, View out) = 0;
  // a += scale * b
  virtual void add(View a, View b, size_t count, float scale = 1.0f) = 0;
  // x *= scale
  virtual void scale(View x, float scale, size_t count) = 0;
  // out[n, w.rows] = x[n, w.cols] · Wᵀ   (expert 0 of a stack is not meant here)
  virtual void matmul(const Weight& w, View x, int n, View out) = 0;
  // Several matmuls of the same input (fused projections): one launch where the backend can.
  struct MatmulJob {
    const Weight* weight;
    View out;
    // Full fp32 precision even where the backend multiplies prompts in lower precision: the router,
    // whose top-k choices a rounding error may flip.
    bool exact = false;
  };
  virtual void matmul_group(const std::vector<MatmulJob>& jobs, View x, int n) {
    for (const MatmulJob& j : jobs) matmul(*j.weight, x, n, j.out);
  }

  // Gated DeltaNet.
  // Depthwise causal conv over time then SiLU: `state` [kernel-1, channels] holds the raw inputs of the
  // previous tokens and is updated; weights [channels, kernel].
  virtual void conv_silu(View x, View state, View weights, int n, int channels, int kernel, View out) = 0;
  // The gated delta rule, token by token: qkv [n, conv_dim] (after conv), b and a [n, value_heads],
  // state [value_heads, key_dim, value_dim] (fp32, updated); out [n, value_heads * value_dim].
  virtual void deltanet(View qkv, View b, View a, View A_log, View dt_bias, View state, int n,
                        const DeltaNetShape& s, View out, const DeltaNetTrace& trace) = 0;
  // out = rms_norm(x) * weight * silu(z) per row of `dim`
  virtual void gated_rms_norm(View x, View z, View weight, int rows, int dim, float eps, View out) = 0;

  // Gated attention.
  // The element type of the KV cache of attention layers of shape s (F32, or F16 where every attention
  // kernel that reads the cache rounds keys and values to half anyway: decode then reads half the bytes).
  virtual ElemType kv_cache_type(const AttentionShape& s) const {
    (void)s;
    return ElemType::F32;
  }
  // Splits q_proj's per-head [query | gate] rows, applies q/k RMSNorm and partial RoPE at positions
  // pos0 .. pos0+n-1. qg [n, heads*(gated?2:1)*head_dim], k [n, kv_heads*head_dim] (in place);
  // writes q [n, heads*head_dim] and gate [n, heads*head_dim]; when k_rows is set, also the cache rows
  // k_rows and v_rows [n, kv_heads*head_dim] (of kv_cache_type) from k and v [n, kv_heads*head_dim].
  virtual void attention_prep(View qg, View k, View v, View q_norm, View k_norm, int n, int pos0,
                              const AttentionShape& s, View q, View gate, View k_rows, View v_rows) = 0;
  // Causal attention of n queries at pos0.. over the cache rows 0 .. pos0+n-1 (GQA).
  // out [n, heads*head_dim]. probs, when set, receives [heads, n, pos0+n] softmax weights. gate, when
  // set ([n, heads*head_dim]), is the output gate: out *= sigmoid(gate).
  virtual void attention(View q, View k_cache, View v_cache, int n, int pos0, const AttentionShape& s, View out,
                         View probs, View gate) = 0;

  // Mixture of experts.
  // Router: probabilities = softmax(logits + bias) over all experts; top-k; renormalised when asked.
  // bias (optional, [n, experts]) is how interventions reach the router: -inf disables an expert (its
  // probability is 0, so the rest renormalise), +inf forces it into the top-k (its probability is
  // computed without the bias), a finite value is added to the logit. probs receives the probabilities.
  virtual void route(View logits, View bias, int n, int experts, int k, bool renormalize, View ids, View weights,
                     View probs) = 0;
  // The gated shared expert of a MoE layer, which moe_experts adds to its output: for each row t,
  // scale · sigmoid(gate_logit[t]) · down(silu(gate · x[t]) * (up · x[t])).
  struct SharedExpert {
    const Weight* gate = nullptr;  // null: none (or removed by an intervention)
    const Weight* up = nullptr;
    const Weight* down = nullptr;
    View gate_logit;  // [n]
    float scale = 1.0f;
  };
  // out[t] = Σ_slots weight · down_e(silu(gate_e(x)) * up_e(x)) for the chosen experts, plus the shared
  // expert (one call, so that a GPU runs it inside the expert kernels)
  virtual void moe_experts(const Weight& gate, const Weight& up, const Weight& down, View x, View ids, View weights,
                           int n, int k, View out, const SharedExpert& shared) = 0;

  // Greedy decoding without a read-back: ids[r] = the index of the largest value of logits row r
  // (the first of equal ones; NaNs never win).
  virtual void argmax(View logits, int rows, int vocab, View ids) = 0;

 protected:
  virtual int default_prefill_chunk() const { return 512; }

 private:
  int prefill_chunk_ = 0;
};

}  // namespace moelens
