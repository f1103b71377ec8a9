// moelens-gpu-bench: decode and prefill speed of a checkpoint on a GPU backend, and agreement of that
// backend with the CPU backend (the reference). For machines without Node (the H200) and for a Mac.
//
//   moelens-gpu-bench speed DIR [--backend cuda] [--precision fp16|fp32] [--prompt 256] [--decode 128] [--warmup 4] [--peak-gbps 4800]
//   moelens-gpu-bench agree DIR... [--backend cuda] [--precision fp16|fp32] [--positions 64] [--decode 32]
//   moelens-gpu-bench prefill DIR [--backend cuda] [--prompts 512,4096] [--repeat 3] [--compare-max 4096] [--peak-tflops 989]
//
// speed: a synthetic prompt (token i = (i * 2654435761 mod 2^32) mod vocab, as Lily's benchmark), one
// timed prefill, then greedy decoding twice: with the logits read back each step, and with the token
// kept on the device (the reported figure; both must choose the same tokens); prints tok/s, kernel
// launches per token, the bytes each decoded token reads (weights, DeltaNet state, the KV cache at the
// context) and the fraction of the given peak bandwidth that makes, and the runtime's report (on Metal:
// Objective-C messages and host microseconds spent encoding and committing, per token).
// agree: per checkpoint, teacher-forced top-1 over `positions` random tokens against the CPU backend
// (>= 99.5 % of positions, and every position whose CPU top-2 gap exceeds 1 % of the logits' std), as
// the device runs and with its routing pinned to the CPU's (the routing flips at router near-ties
// counted apart), then greedy decoding on both until the first near-tie; exits 1 when either fails.
// prefill: for each prompt length, the best of `repeat` prefills (fresh sessions, the synthetic prompt)
// in fp16 (the tiled kernels) and, up to --compare-max tokens, fp32 (the decode kernels), as tok/s and as the fraction of the given
// tensor-core peak that the model's matrix work makes (2 flops per weight a token meets, experts k/E of
// theirs, the lm_head once; attention 4 x heads x head_dim per cached position), and every timed fp16 run
// with their mean (llama-bench reports a mean); the shortest prompt at
// which fp16 is faster is the tiled kernels' threshold (PREFILL_MIN_TOKENS). For a mixture-of-experts
// model it also prints the routing each length gave (the experts used per layer and the largest
// bucket against the mean): the MoE kernels' work depends on it, not only on the length.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/gpu/gpu_backend.h"
#include "backends/registry.h"
#include "core/model.h"
#include "core/session.h"

using namespace moelens;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string mode, backend = "cuda", precision;  // empty: the backend's default
  std::vector<std::string> dirs;
  int prompt = 256, decode = -1, warmup = 4, positions = 64, repeat = 3, compare_max = 4096;
  std::vector<int> prompts = {1, 2, 4, 8, 16, 32, 64, 128, 512, 4096};
  double peak_gbps = 4800, peak_tflops = 989;
};

int argmax(const float* v, int n) { return int(std::max_element(v, v + n) - v); }

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Bytes a decoded token reads: every dense matrix, k/E of each expert stack, one embedding row (weights),
// the DeltaNet state (read and written, fp32) and the KV cache (K and V rows of every attention layer,
// in the backend's cache type: kv_cache_type) at `context` tokens.
struct TokenBytes {
  double weights = 0, state = 0, kv = 0;
  double total() const { return weights + state + kv; }
};

TokenBytes bytes_per_token(const Model& m, int context) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  TokenBytes b;
  const double kv_bytes = double(elem_bytes(m.backend().kv_cache_type(attention_shape(c))));
  b.weights = double(w.lm_head.bytes()) + double(w.embed.bytes()) / double(c.vocab_size);
  const double active = double(c.experts_per_token) / double(c.num_experts);
  for (const LayerWeights& L : w.layers) {
    if (L.kind == LayerKind::DeltaNet) {
      const DeltaNetWeights& d = L.deltanet;
      b.weights += double(d.in_qkv.bytes() + d.in_z.bytes() + d.in_b.bytes() + d.in_a.bytes() + d.out.bytes());
      b.state += 2.0 * 4.0 * c.linear_value_heads * c.linear_key_dim * c.linear_value_dim;
    } else {
      const AttentionWeights& a = L.attention;
      b.weights += double(a.q.bytes() + a.k.bytes() + a.v.bytes() + a.o.bytes());
      b.kv += 2.0 * kv_bytes * double(context) * c.num_kv_heads * c.head_dim;
    }
    const MoEWeights& e = L.moe;
    b.weights += double(e.router.bytes() + e.shared_gate.bytes() + e.shared_up.bytes() + e.shared_down.bytes() +
                        e.shared_expert_gate.bytes());
    b.weights += active * double(e.gate.bytes() + e.up.bytes() + e.down.bytes());
  }
  return b;
}

int speed(const Options& o) {
  std::printf("loading %s on %s (precision %s)...\n", o.dirs[0].c_str(), o.backend.c_str(), o.precision.empty() ? "default" : o.precision.c_str());
  const auto t0 = Clock::now();
  std::unique_ptr<Model> model = Model::load(o.dirs[0], make_backend(o.backend, {0, o.precision}));
  const ModelConfig& c = model->config();
  std::printf("loaded in %.1f s: %d layers, hidden %d, %d experts top-%d, vocab %d, %.2f GB of weights\n",
              seconds(t0, Clock::now()), c.num_layers, c.hidden_size, c.num_experts, c.experts_per_token, c.vocab_size,
              double(model->weight_bytes()) / 1e9);
  auto* gpu = dynamic_cast<gpu::GpuBackend*>(&model->backend());
  const int decode = o.decode < 0 ? 128 : o.decode;

  std::vector<int32_t> prompt(size_t(o.prompt));
  for (int i = 0; i < o.prompt; ++i) prompt[size_t(i)] = int32_t((uint64_t(uint32_t(uint64_t(i) * 2654435761ull))) % uint64_t(c.vocab_size));
  ForwardOptions last;
  last.logits = LogitsMode::Last;

  // Warm-up on a throwaway session (pipelines, graphs, allocations).
  {
    Session warm(*model);
    warm.forward(prompt.data(), std::min(o.prompt, 16), last);
    int32_t tok = 1;
    for (int i = 0; i < o.warmup; ++i) tok = argmax(warm.forward(&tok, 1, last).logits.data(), c.vocab_size);
    warm.decode_greedy(tok, o.warmup, ForwardOptions{});
  }

  // 1. Prefill, then greedy decoding with the logits read back and the arg-max taken on the host.
  Session s(*model);
  const auto p0 = Clock::now();
  ForwardResult r = s.forward(prompt.data(), o.prompt, last);
  const double prefill_s = seconds(p0, Clock::now());
  const int32_t first = argmax(r.logits.data(), c.vocab_size);
  int32_t tok = first;
  std::vector<int32_t> host_tokens;
  std::vector<double> step(static_cast<size_t>(decode));
  const auto h0 = Clock::now();
  for (int i = 0; i < decode; ++i) {
    const auto a = Clock::now();
    r = s.forward(&tok, 1, last);
    tok = argmax(r.logits.data(), c.vocab_size);
    host_tokens.push_back(tok);
    step[size_t(i)] = seconds(a, Clock::now());
  }
  const double host_s = seconds(h0, Clock::now());
  std::vector<double> sorted = step;
  std::sort(sorted.begin(), sorted.end());
  std::printf("prefill: %d tokens in %.3f s = %.1f tok/s\n", o.prompt, prefill_s, o.prompt / prefill_s);
  std::printf("decode, logits read back each step: %d tokens, %.2f tok/s (median step %.3f ms, min %.3f ms)\n", decode,
              decode / host_s, sorted[sorted.size() / 2] * 1e3, sorted.front() * 1e3);

  // 2. The same decode with the token kept on the device (Session::decode_greedy): the figure reported.
  Session g(*model);
  g.forward(prompt.data(), o.prompt, last);
  const uint64_t launches0 = gpu ? gpu->dispatch_count() : 0;
  if (gpu) gpu->runtime().reset_stats();  // the runtime's report covers this decode only
  const auto g0 = Clock::now();
  const std::vector<int32_t> tokens = g.decode_greedy(first, decode, ForwardOptions{});
  const double total = seconds(g0, Clock::now());
  const uint64_t launches = gpu ? gpu->dispatch_count() - launches0 : 0;
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over the generated ids
  for (int32_t t : tokens) digest = (digest ^ uint64_t(uint32_t(t))) * 1099511628211ull;
  const auto differ = std::mismatch(tokens.begin(), tokens.end(), host_tokens.begin());
  const double tok_s = decode / total;
  const TokenBytes split = bytes_per_token(*model, o.prompt + decode / 2);
  const double bytes = split.total();
  std::printf("decode, token kept on the device: %d tokens, %.2f tok/s (%.3f ms per token), digest %016llx, %s\n",
              decode, tok_s, 1e3 * total / decode, static_cast<unsigned long long>(digest),
              differ.first == tokens.end() ? "same tokens as the read-back loop"
                                           : ("tokens differ from the read-back loop at step " +
                                              std::to_string(differ.first - tokens.begin()))
                                                 .c_str());
  std::printf("decode reads %.3f GB per token (weights %.3f, DeltaNet state %.3f, KV at %d %.3f): %.0f GB/s = %.1f %% of %.0f GB/s\n",
              bytes / 1e9, split.weights / 1e9, split.state / 1e9, o.prompt + decode / 2, split.kv / 1e9,
              bytes * tok_s / 1e9, 100.0 * bytes * tok_s / 1e9 / o.peak_gbps, o.peak_gbps);
  if (gpu) {
    std::printf("kernel launches per decoded token: %.1f\n", double(launches) / decode);
    const std::string st = gpu->runtime().stats();
    if (!st.empty()) std::printf("runtime: %s\n", st.c_str());
    // The host's cost of a step beside the step's time: with commits not waited for, encoding overlaps
    // the GPU's work and limits decode only when it approaches the time per token.
    const gpu::HostEncoding host = gpu->runtime().host_encoding();
    if (host.calls)
      std::printf("host per decoded token: %.1f calls to %s (%.1f elided), %.1f us encoding + %.1f us committing = %.1f %% "
                  "of the %.3f ms per token\n",
                  double(host.calls) / decode, gpu->runtime().name(), double(host.elided) / decode, 1e6 * host.encode_s / decode,
                  1e6 * host.submit_s / decode, 100.0 * (host.encode_s + host.submit_s) / total, 1e3 * total / decode);
  }
  return 0;
}

// Matrix flops of a prefill of `n` tokens after `pos0` cached ones (logits of the last token only).
double prefill_flops(const Model& m, int n, int pos0) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  auto mm = [](const LinearWeight& x) { return 2.0 * double(x.rows) * double(x.cols); };
  double per_token = 0, attention = 0;
  for (const LayerWeights& L : w.layers) {
    if (L.kind == LayerKind::Attention) {
      const AttentionWeights& a = L.attention;
      per_token += mm(a.q) + mm(a.k) + mm(a.v) + mm(a.o);
      // QK and PV over the cached positions p0+1 .. p0+n (causal)
      attention += 4.0 * c.num_heads * c.head_dim * (double(n) * pos0 + double(n) * (n + 1) / 2);
    } else {
      const DeltaNetWeights& d = L.deltanet;
      per_token += mm(d.in_qkv) + mm(d.in_z) + mm(d.in_b) + mm(d.in_a) + mm(d.out);
    }
    const MoEWeights& e = L.moe;
    per_token += mm(e.router) + mm(e.shared_gate) + mm(e.shared_up) + mm(e.shared_down) + mm(e.shared_expert_gate);
    per_token += double(c.experts_per_token) * (mm(e.gate) + mm(e.up) + mm(e.down));
  }
  return per_token * n + attention + mm(w.lm_head);
}

// How one prefill of `ids` routes: per layer, the experts that receive entries and the largest bucket,
// as ranges over the layers, against the mean bucket (n · k / experts).
std::string routing_summary(const Model& model, const std::vector<int32_t>& ids) {
  const ModelConfig& c = model.config();
  ForwardOptions options;
  options.logits = LogitsMode::None;
  options.capture.names = {"blocks.*.moe.topk_ids"};
  Session s(model);
  const ForwardResult r = s.forward(ids.data(), int(ids.size()), options);
  int used_lo = c.num_experts, used_hi = 0, largest_lo = INT_MAX, largest_hi = 0;
  for (const Captured& cap : r.captures) {
    std::vector<int> count(size_t(c.num_experts), 0);
    for (int32_t e : cap.i32)
      if (e >= 0 && e < c.num_experts) ++count[size_t(e)];
    const int used = int(std::count_if(count.begin(), count.end(), [](int x) { return x > 0; }));
    const int largest = *std::max_element(count.begin(), count.end());
    used_lo = std::min(used_lo, used), used_hi = std::max(used_hi, used);
    largest_lo = std::min(largest_lo, largest), largest_hi = std::max(largest_hi, largest);
  }
  char line[256];
  std::snprintf(line, sizeof line, "%d-%d of %d experts used per layer, largest bucket %d-%d entries (mean %.1f)",
                used_lo, used_hi, c.num_experts, largest_lo, largest_hi,
                double(ids.size()) * c.experts_per_token / c.num_experts);
  return line;
}

int prefill(const Options& o) {
  BackendOptions options;
  options.precision = "fp16";
  options.prefill_min_tokens = 1;  // the fp16 column times the tiled kernels at every length: the crossover
  std::unique_ptr<Model> model = Model::load(o.dirs[0], make_backend(o.backend, options));
  auto* gpu = dynamic_cast<gpu::GpuBackend*>(&model->backend());
  if (!gpu) throw std::runtime_error("prefill compares the GPU backend's precisions: use a GPU backend");
  const int vocab = model->config().vocab_size;
  ForwardOptions last;
  last.logits = LogitsMode::Last;
  std::printf("prompt  | fp16 tok/s | fp16 ms  | TFLOP/s | of %.0f | fp32 tok/s | fp16/fp32\n", o.peak_tflops);
  int threshold = 0;
  for (int n : o.prompts) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[size_t(i)] = int32_t(uint64_t(uint32_t(uint64_t(i) * 2654435761ull)) % uint64_t(vocab));
    double best[2] = {1e30, 1e30};
    std::string runs;  // every timed fp16 run's tok/s: a peer's mean compares with their mean, its best with the best
    double sum = 0;
    for (int p = 0; p < (n <= o.compare_max ? 2 : 1); ++p) {
      gpu->set_precision(p == 0 ? gpu::Precision::F16 : gpu::Precision::F32);
      for (int r = 0; r <= o.repeat; ++r) {  // the first run warms up (and loads the kernels' modules)
        Session s(*model);
        const auto t0 = Clock::now();
        s.forward(ids.data(), n, last);
        const double t = seconds(t0, Clock::now());
        if (r > 0) best[p] = std::min(best[p], t);
        else gpu->runtime().reset_stats();
        if (r > 0 && p == 0) {
          char run[32];
          std::snprintf(run, sizeof run, " %.1f", n / t);
          runs += run, sum += n / t;
        }
      }
      // The runtime's report of the timed fp16 runs of this length: graphs built and reused, host and GPU
      // time per launch (under MOELENS_CUDA_PROFILE=1, the time per kernel).
      if (p == 0) std::printf("runtime, fp16, %d tokens: %s\n", n, gpu->runtime().stats().c_str());
    }
    std::printf("fp16 runs, %d tokens, tok/s:%s (mean %.1f)\n", n, runs.c_str(), sum / o.repeat);
    gpu->set_precision(gpu::Precision::F16);  // the routing run's, and the model's after the last length
    if (model->config().num_experts > 0) std::printf("routing, %d tokens: %s\n", n, routing_summary(*model, ids).c_str());
    const double tflops = prefill_flops(*model, n, 0) / best[0] / 1e12;
    if (n <= o.compare_max)
      std::printf("%7d | %10.1f | %8.3f | %7.1f | %5.1f %% | %10.1f | %.2fx\n", n, n / best[0], best[0] * 1e3, tflops,
                  100.0 * tflops / o.peak_tflops, n / best[1], best[1] / best[0]);
    else
      std::printf("%7d | %10.1f | %8.3f | %7.1f | %5.1f %% |          - |\n", n, n / best[0], best[0] * 1e3, tflops,
                  100.0 * tflops / o.peak_tflops);
    if (!threshold && best[0] < best[1]) threshold = n;
  }
  std::printf("shortest prompt at which the tiled kernels are faster: %d (PREFILL_MIN_TOKENS is %u)\n", threshold,
              unsigned(PREFILL_MIN_TOKENS));
  return 0;
}

// Logits' standard deviation and the gap between the two largest.
void spread(const float* v, int n, double* sd, double* gap) {
  double mean = 0, sq = 0;
  for (int i = 0; i < n; ++i) mean += v[i];
  mean /= n;
  for (int i = 0; i < n; ++i) sq += (v[i] - mean) * (v[i] - mean);
  *sd = std::sqrt(sq / n);
  float a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (v[i] > a) b = a, a = v[i];
    else if (v[i] > b) b = v[i];
  }
  *gap = double(a) - double(b);
}

// Teacher-forced top-1 of the device's logits against the reference's: the share of positions that
// agree, the mismatches where the reference's top-2 gap exceeds 1 % of its logits' std (confident), the
// worst |diff| / max |logit| of a row; `ok` under the 99.5 % and no-confident-mismatch rule.
struct Agreement {
  double percent = 0, worst_rel = 0;
  int confident_mismatches = 0;
  bool ok() const { return percent >= 99.5 && confident_mismatches == 0; }
};

Agreement compare_logits(const std::vector<float>& ref, const std::vector<float>& dev, int positions, int V) {
  Agreement a;
  int same = 0;
  for (int t = 0; t < positions; ++t) {
    const float* r = &ref[size_t(t) * V];
    const float* d = &dev[size_t(t) * V];
    double sd, gap;
    spread(r, V, &sd, &gap);
    const bool match = argmax(r, V) == argmax(d, V);
    same += match;
    if (!match && gap > 0.01 * sd) ++a.confident_mismatches;
    double diff = 0, scale = 0;
    for (int i = 0; i < V; ++i) diff = std::max(diff, double(std::fabs(r[i] - d[i]))), scale = std::max(scale, double(std::fabs(r[i])));
    a.worst_rel = std::max(a.worst_rel, diff / scale);
  }
  a.percent = 100.0 * same / positions;
  return a;
}

// A capture of `call` by hook point name and layer.
const Captured& captured(const ForwardResult& call, const std::string& name, int layer) {
  for (const Captured& c : call.captures)
    if (c.layer == layer && c.name == name) return c;
  throw std::runtime_error("no capture of " + name + " at layer " + std::to_string(layer));
}

std::string layer_point(int layer, const char* point) { return "blocks." + std::to_string(layer) + ".moe." + point; }

// Where the device chose other experts than the reference: how many (layer, position) choices differ,
// and at the earliest position (lowest layer first) the gap between the reference's k-th and (k+1)-th
// router logit.
struct RoutingFlips {
  int count = 0, choices = 0, layer = -1, position = -1;
  double gap = 0;
};

RoutingFlips routing_flips(const ForwardResult& ref, const ForwardResult& dev, int layers, int positions, int E, int k) {
  std::vector<const std::vector<int32_t>*> ref_ids, dev_ids;  // per layer, looked up once
  for (int l = 0; l < layers; ++l) {
    ref_ids.push_back(&captured(ref, layer_point(l, "topk_ids"), l).i32);
    dev_ids.push_back(&captured(dev, layer_point(l, "topk_ids"), l).i32);
  }
  RoutingFlips f;
  for (int t = 0; t < positions; ++t)
    for (int l = 0; l < layers; ++l) {
      const std::vector<int32_t>& a = *ref_ids[size_t(l)];
      const std::vector<int32_t>& b = *dev_ids[size_t(l)];
      std::vector<int32_t> x(a.begin() + size_t(t) * k, a.begin() + size_t(t + 1) * k);
      std::vector<int32_t> y(b.begin() + size_t(t) * k, b.begin() + size_t(t + 1) * k);
      std::sort(x.begin(), x.end());
      std::sort(y.begin(), y.end());
      ++f.choices;
      if (x == y) continue;
      if (f.count++ == 0) {
        const std::vector<float>& logits = captured(ref, layer_point(l, "router_logits"), l).f32;
        std::vector<float> row(logits.begin() + size_t(t) * E, logits.begin() + size_t(t + 1) * E);
        std::sort(row.begin(), row.end(), std::greater<float>());
        f.layer = l, f.position = t, f.gap = double(row[size_t(k) - 1]) - double(row[size_t(k)]);
      }
    }
  return f;
}

// Per checkpoint: teacher-forced logits of `positions` random tokens on the reference (CPU) and the
// device, once as they run and once with the device's routing pinned to the reference's (its router
// logits written over the device's at every layer and position, so both choose the same experts with
// the same weights). A top-k router is discontinuous: where the reference's k-th and (k+1)-th router
// logits are closer than the router input's error, a lower precision may pick the other expert, and
// that one choice moves the rest of the row. The pinned run measures the kernels without that; the
// free run counts the routing flips. ok: the pinned run passes the rule, and so does the free run
// unless its routing differs somewhere. Then greedy decoding on both until the first near-tie.
int agree(const Options& o) {
  int failures = 0;
  for (const std::string& dir : o.dirs) {
    std::unique_ptr<Model> ref = Model::load(dir, make_backend("cpu"));
    std::unique_ptr<Model> dev = Model::load(dir, make_backend(o.backend, {0, o.precision}));
    const ModelConfig& c = ref->config();
    const int V = c.vocab_size, layers = c.num_layers;
    std::mt19937 rng(12345);
    std::vector<int32_t> ids(size_t(o.positions));
    for (int32_t& id : ids) id = int32_t(rng() % uint32_t(V));
    ForwardOptions all;
    all.logits = LogitsMode::All;
    all.capture.names = {"blocks.*.moe.router_logits", "blocks.*.moe.topk_ids"};
    Session sr(*ref), sd(*dev);
    ForwardResult rr = sr.forward(ids.data(), o.positions, all), rd = sd.forward(ids.data(), o.positions, all);
    const Agreement free = compare_logits(rr.logits, rd.logits, o.positions, V);
    const RoutingFlips flips = routing_flips(rr, rd, layers, o.positions, c.num_experts, c.experts_per_token);

    ForwardOptions pinned;
    pinned.logits = LogitsMode::All;
    for (int l = 0; l < layers; ++l) {
      HookEdit e;
      e.name = layer_point(l, "router_logits");
      e.op = HookEdit::Op::Set;
      for (int t = 0; t < o.positions; ++t) e.positions.push_back(t);
      e.values = captured(rr, e.name, l).f32;
      pinned.edits.push_back(std::move(e));
    }
    const Agreement pin = compare_logits(rr.logits, Session(*dev).forward(ids.data(), o.positions, pinned).logits, o.positions, V);

    // Greedy decoding on both, until the first position where the CPU's top-2 gap is within 1 % of the std.
    const int steps = o.decode < 0 ? 32 : o.decode;
    ForwardOptions last;
    last.logits = LogitsMode::Last;
    int32_t tr = argmax(&rr.logits[size_t(o.positions - 1) * V], V), td = argmax(&rd.logits[size_t(o.positions - 1) * V], V);
    int followed = 0;
    bool diverged = false, near_tie = false;
    for (int i = 0; i < steps && !near_tie && !diverged; ++i) {
      if (tr != td) {
        diverged = true;
        break;
      }
      ForwardResult a = sr.forward(&tr, 1, last), b = sd.forward(&td, 1, last);
      double sd_, gap;
      spread(a.logits.data(), V, &sd_, &gap);
      tr = argmax(a.logits.data(), V);
      td = argmax(b.logits.data(), V);
      ++followed;
      near_tie = gap <= 0.01 * sd_;
    }
    const bool ok = pin.ok() && (free.ok() || flips.count > 0) && !diverged;
    failures += !ok;
    char first[160] = "";
    if (flips.count)
      std::snprintf(first, sizeof first, " (first: layer %d, position %d, where the reference's k-th/(k+1)-th router gap is %.2e)",
                    flips.layer, flips.position, flips.gap);
    std::printf("%s: teacher-forced top-1 %.2f %% of %d positions, %d confident mismatches, max |diff|/max|logit| %.2e; "
                "routing differs in %d of %d choices%s; with the reference's routing: top-1 %.2f %%, %d confident "
                "mismatches, max |diff|/max|logit| %.2e; greedy followed %d tokens%s | %s\n",
                dir.c_str(), free.percent, o.positions, free.confident_mismatches, free.worst_rel, flips.count, flips.choices,
                first, pin.percent, pin.confident_mismatches, pin.worst_rel, followed,
                diverged ? " then diverged" : near_tie ? " to a near-tie" : "", ok ? "ok" : "FAIL");
  }
  return failures ? 1 : 0;
}

std::string backend_list() {
  std::string s;
  for (const std::string& n : backend_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// A number argument of `option`; exits 2 with a message naming the option when it is not one.
double parse_number(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) {
    std::fprintf(stderr, "moelens-gpu-bench: %s takes a number, got '%s'\n", option.c_str(), text.c_str());
    std::exit(2);
  }
  return v;
}

void usage() {
  std::printf(
      "usage: moelens-gpu-bench speed DIR [--backend NAME] [--precision P] [--prompt N] [--decode N] [--warmup N] [--peak-gbps G]\n"
      "       moelens-gpu-bench agree DIR... [--backend NAME] [--precision P] [--positions N] [--decode N]\n"
      "       moelens-gpu-bench prefill DIR [--backend NAME] [--prompts N,N,...] [--repeat N] [--compare-max N] [--peak-tflops T]\n"
      "Backends in this build: %s.\n",
      backend_list().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach a log even if the run is cut short
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto number = [&]() {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return parse_number(a, argv[++i]);
    };
    if (a == "--help" || a == "-h") return usage(), 0;
    if (a == "--backend" && i + 1 < argc) o.backend = argv[++i];
    else if (a == "--precision" && i + 1 < argc) o.precision = argv[++i];
    else if (a == "--prompt") o.prompt = int(number());
    else if (a == "--decode") o.decode = int(number());
    else if (a == "--warmup") o.warmup = int(number());
    else if (a == "--positions") o.positions = int(number());
    else if (a == "--repeat") o.repeat = int(number());
    else if (a == "--compare-max") o.compare_max = int(number());
    else if (a == "--peak-tflops") o.peak_tflops = number();
    else if (a == "--prompts" && i + 1 < argc) {
      o.prompts.clear();
      std::stringstream list(argv[++i]);
      for (std::string v; std::getline(list, v, ',');) o.prompts.push_back(int(parse_number(a, v)));
    }
    else if (a == "--peak-gbps") o.peak_gbps = number();
    else if (o.mode.empty()) o.mode = a;
    else o.dirs.push_back(a);
  }
  if ((o.mode != "speed" && o.mode != "agree" && o.mode != "prefill") || o.dirs.empty()) return usage(), 2;
  const char* wrong = o.prompt < 1 ? "--prompt takes 1 token or more"
                      : o.positions < 1 ? "--positions takes 1 or more"
                      : o.repeat < 1 ? "--repeat takes 1 or more (a warm-up run comes before them)"
                      : o.warmup < 0 ? "--warmup takes 0 or more"
                      : o.prompts.empty() || *std::min_element(o.prompts.begin(), o.prompts.end()) < 1
                          ? "--prompts takes token counts of 1 or more, like 512,4096"
                      : !(o.peak_gbps > 0 && o.peak_tflops > 0) ? "--peak-gbps and --peak-tflops take positive values"
                                                                  : nullptr;
  if (wrong) {
    std::fprintf(stderr, "moelens-gpu-bench: %s\n", wrong);
    return 2;
  }
  try {
    return o.mode == "speed" ? speed(o) : o.mode == "prefill" ? prefill(o) : agree(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelens-gpu-bench: %s\n", e.what());
    return 1;
  }
}
