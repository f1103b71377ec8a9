// moelens-gpu-bench: decode and prefill speed of a checkpoint on a GPU backend, and agreement of that
// backend with the CPU backend (the reference). For machines without Node (the H200) and for a Mac.
//
//   moelens-gpu-bench speed DIR [--backend cuda] [--precision fp16|fp32] [--prompt 256] [--decode 128] [--warmup 4] [--peak-gbps 4800]
//   moelens-gpu-bench agree DIR... [--backend cuda] [--precision fp16|fp32] [--positions 64] [--decode 32]
//
// speed: a synthetic prompt (token i = (i * 2654435761 mod 2^32) mod vocab, as Lily's benchmark), one
// timed prefill, then greedy decoding twice: with the logits read back each step, and with the token
// kept on the device (the reported figure; both must choose the same tokens); prints tok/s, kernel
// launches per token, the weight and state bytes each decoded token reads and the fraction of the
// given peak bandwidth that makes.
// agree: per checkpoint, teacher-forced top-1 over `positions` random tokens against the CPU backend
// (>= 99.5 % of positions, and every position whose CPU top-2 gap exceeds 1 % of the logits' std),
// then greedy decoding on both until the first near-tie; exits 1 when either fails.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
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
  int prompt = 256, decode = -1, warmup = 4, positions = 64;
  double peak_gbps = 4800;
};

int argmax(const float* v, int n) { return int(std::max_element(v, v + n) - v); }

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Bytes a decoded token reads: every dense matrix, k/E of each expert stack, one embedding row, the
// DeltaNet state (read and written, fp32) and the KV cache (fp32) at `context` tokens.
double bytes_per_token(const Model& m, int context) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  double b = double(w.lm_head.bytes()) + double(w.embed.bytes()) / double(c.vocab_size);
  const double active = double(c.experts_per_token) / double(c.num_experts);
  for (const LayerWeights& L : w.layers) {
    if (L.kind == LayerKind::DeltaNet) {
      const DeltaNetWeights& d = L.deltanet;
      b += double(d.in_qkv.bytes() + d.in_z.bytes() + d.in_b.bytes() + d.in_a.bytes() + d.out.bytes());
      b += 2.0 * 4.0 * c.linear_value_heads * c.linear_key_dim * c.linear_value_dim;
    } else {
      const AttentionWeights& a = L.attention;
      b += double(a.q.bytes() + a.k.bytes() + a.v.bytes() + a.o.bytes());
      b += 2.0 * 4.0 * double(context) * c.num_kv_heads * c.head_dim;
    }
    const MoEWeights& e = L.moe;
    b += double(e.router.bytes() + e.shared_gate.bytes() + e.shared_up.bytes() + e.shared_down.bytes() +
                e.shared_expert_gate.bytes());
    b += active * double(e.gate.bytes() + e.up.bytes() + e.down.bytes());
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
  const double bytes = bytes_per_token(*model, o.prompt + decode / 2);
  std::printf("decode, token kept on the device: %d tokens, %.2f tok/s (%.3f ms per token), digest %016llx, %s\n",
              decode, tok_s, 1e3 * total / decode, static_cast<unsigned long long>(digest),
              differ.first == tokens.end() ? "same tokens as the read-back loop"
                                           : ("tokens differ from the read-back loop at step " +
                                              std::to_string(differ.first - tokens.begin()))
                                                 .c_str());
  std::printf("decode reads %.3f GB per token (weights, DeltaNet state, KV at %d): %.0f GB/s = %.1f %% of %.0f GB/s\n",
              bytes / 1e9, o.prompt + decode / 2, bytes * tok_s / 1e9, 100.0 * bytes * tok_s / 1e9 / o.peak_gbps,
              o.peak_gbps);
  if (gpu) {
    std::printf("kernel launches per decoded token: %.1f\n", double(launches) / decode);
    const std::string st = gpu->runtime().stats();
    if (!st.empty()) std::printf("runtime: %s\n", st.c_str());
  }
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

int agree(const Options& o) {
  int failures = 0;
  for (const std::string& dir : o.dirs) {
    std::unique_ptr<Model> ref = Model::load(dir, make_backend("cpu"));
    std::unique_ptr<Model> dev = Model::load(dir, make_backend(o.backend, {0, o.precision}));
    const int V = ref->config().vocab_size;
    std::mt19937 rng(12345);
    std::vector<int32_t> ids(size_t(o.positions));
    for (int32_t& id : ids) id = int32_t(rng() % uint32_t(V));
    ForwardOptions all;
    all.logits = LogitsMode::All;
    Session sr(*ref), sd(*dev);
    ForwardResult rr = sr.forward(ids.data(), o.positions, all), rd = sd.forward(ids.data(), o.positions, all);
    int same = 0, confident_mismatch = 0;
    double worst_rel = 0;
    for (int t = 0; t < o.positions; ++t) {
      const float* a = &rr.logits[size_t(t) * V];
      const float* b = &rd.logits[size_t(t) * V];
      double sd_, gap;
      spread(a, V, &sd_, &gap);
      const bool match = argmax(a, V) == argmax(b, V);
      same += match;
      if (!match && gap > 0.01 * sd_) ++confident_mismatch;
      double diff = 0, scale = 0;
      for (int i = 0; i < V; ++i) diff = std::max(diff, double(std::fabs(a[i] - b[i]))), scale = std::max(scale, double(std::fabs(a[i])));
      worst_rel = std::max(worst_rel, diff / scale);
    }
    const double pct = 100.0 * same / o.positions;
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
    const bool ok = pct >= 99.5 && confident_mismatch == 0 && !diverged;
    failures += !ok;
    std::printf("%s: teacher-forced top-1 %.2f %% of %d positions, %d confident mismatches, max |diff|/max|logit| %.2e; "
                "greedy followed %d tokens%s | %s\n",
                dir.c_str(), pct, o.positions, confident_mismatch, worst_rel, followed,
                diverged ? " then diverged" : near_tie ? " to a near-tie" : "", ok ? "ok" : "FAIL");
  }
  return failures ? 1 : 0;
}

std::string backend_list() {
  std::string s;
  for (const std::string& n : backend_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void usage() {
  std::printf(
      "usage: moelens-gpu-bench speed DIR [--backend NAME] [--precision P] [--prompt N] [--decode N] [--warmup N] [--peak-gbps G]\n"
      "       moelens-gpu-bench agree DIR... [--backend NAME] [--precision P] [--positions N] [--decode N]\n"
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
      return std::stod(argv[++i]);
    };
    if (a == "--help" || a == "-h") return usage(), 0;
    if (a == "--backend" && i + 1 < argc) o.backend = argv[++i];
    else if (a == "--precision" && i + 1 < argc) o.precision = argv[++i];
    else if (a == "--prompt") o.prompt = int(number());
    else if (a == "--decode") o.decode = int(number());
    else if (a == "--warmup") o.warmup = int(number());
    else if (a == "--positions") o.positions = int(number());
    else if (a == "--peak-gbps") o.peak_gbps = number();
    else if (o.mode.empty()) o.mode = a;
    else o.dirs.push_back(a);
  }
  if ((o.mode != "speed" && o.mode != "agree") || o.dirs.empty()) return usage(), 2;
  try {
    return o.mode == "speed" ? speed(o) : agree(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelens-gpu-bench: %s\n", e.what());
    return 1;
  }
}
