// moelens-run: loads a checkpoint with the C++ core alone (no Node) and runs a prefill and a greedy
// decode, printing one JSON line of timings. For machines without Node and for benchmarks. Usage: moelens-run MODEL_DIR [--prompt N] [--decode N] [--threads N] [--backend cpu]
// [--precision fp32|int8|int16|int24]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/session.h"

using namespace moelens;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int argmax(const std::vector<float>& v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

void usage() {
  std::fprintf(stderr,
               "usage: moelens-run MODEL_DIR [--prompt N] [--decode N] [--threads N] [--backend cpu] "
               "[--precision fp32|int8|int16|int24]\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::string dir = argv[1], backend = "cpu", precision = "fp32";
  int prompt = 16, decode = 16, threads = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--prompt") prompt = std::atoi(argv[i + 1]);
    else if (k == "--decode") decode = std::atoi(argv[i + 1]);
    else if (k == "--threads") threads = std::atoi(argv[i + 1]);
    else if (k == "--backend") backend = argv[i + 1];
    else if (k == "--precision") precision = argv[i + 1];
    else {
      usage();
      return 2;
    }
  }
  try {
    if (backend != "cpu") fail("unknown backend '", backend, "'");
    cpu::Precision p;
    if (!cpu::parse_precision(precision, &p)) fail("unknown precision '", precision, "' (fp32, int8, int16 or int24)");
    auto t0 = Clock::now();
    auto model = Model::load(dir, std::make_unique<CpuBackend>(threads, p));
    double load_s = seconds_since(t0);
    const int vocab = model->config().vocab_size;
    // Lily's synthetic prompt: token i = ((i * 2654435761) mod 2^32) mod vocab.
    std::vector<int32_t> ids(static_cast<size_t>(std::max(prompt, 1)));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((uint64_t(i) * 2654435761ull % 4294967296ull) % uint64_t(vocab));
    Session s(*model);
    ForwardOptions opt;
    auto t1 = Clock::now();
    ForwardResult r = s.forward(ids.data(), int(ids.size()), opt);
    double prefill_s = seconds_since(t1);
    int next = argmax(r.logits);
    std::string tokens;
    auto t2 = Clock::now();
    for (int i = 0; i < decode; ++i) {
      tokens += (i ? "," : "") + std::to_string(next);
      ForwardResult d = s.forward(&next, 1, opt);
      next = argmax(d.logits);
    }
    double decode_s = seconds_since(t2);
    std::printf(
        "{\"backend\":\"%s\",\"precision\":\"%s\",\"threads\":%d,\"load_s\":%.3f,\"prompt_tokens\":%zu,\"prefill_tok_s\":%.2f,"
        "\"decode_tokens\":%d,\"decode_tok_s\":%.3f,\"tokens\":[%s]}\n",
        model->backend().name(), precision.c_str(), static_cast<CpuBackend&>(model->backend()).threads(), load_s, ids.size(),
        double(ids.size()) / prefill_s, decode, decode > 0 ? decode / decode_s : 0.0, tokens.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelens-run: %s\n", e.what());
    return 1;
  }
  return 0;
}
