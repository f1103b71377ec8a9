// moelens-gpu-check: every kernel of shaders/*.metal against the CPU backend (the numerical
// reference), on random inputs and small shapes, through the GPU backend's own host code.
//
//   moelens-gpu-check                      emulator, forward + reverse + random thread orders
//   moelens-gpu-check --runtime cuda       on an NVIDIA GPU
//   moelens-gpu-check --runtime metal      on the GPU (a Mac)
//
// Prints one line per kernel function: its name, the shapes of the cases that ran it, the orders
// tried, and `ok` or the first failure. Exits 1 when a kernel fails or no case runs it.
#include "check.h"

using namespace moelens;
using namespace moelens::gpu_check;

namespace {

std::vector<Case> cases() {
  std::vector<Case> all;
  add_elementwise_cases(all);
  add_norm_cases(all);
  add_matmul_cases(all);
  add_deltanet_cases(all);
  add_attention_cases(all);
  add_moe_cases(all);
  add_argmax_cases(all);
  return all;
}

struct KernelReport {
  std::set<std::string> shapes, orders;
  std::string failure;
};

}  // namespace

int main(int argc, char** argv) {
  std::string runtime_name = "emulator", filter;
  std::vector<std::string> orders = {"forward", "reverse", "random"};
  uint32_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--runtime") runtime_name = value();
    else if (a == "--orders") {
      orders.clear();
      std::stringstream s(value());
      for (std::string o; std::getline(s, o, ',');) orders.push_back(o);
    } else if (a == "--seed") seed = uint32_t(std::stoul(value()));
    else if (a == "--filter") filter = value();
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: moelens-gpu-check [--runtime NAME] [--orders forward,reverse,random] [--seed N] [--filter TEXT]\n"
          "Runs every kernel of shaders/*.metal through the GPU backend against the CPU backend on random inputs.\n"
          "Runtimes in this build: %s. Thread orders apply to the emulator.\n",
          gpu::available_runtimes().c_str());
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (runtime_name != "emulator") orders = {"device"};

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<KernelReport> report(gpu::kernels::kCount);
  CpuBackend cpu(1);
  int failed_cases = 0;
  for (const std::string& order : orders) {
    std::unique_ptr<gpu::Runtime> rt;
    try {
      rt = gpu::make_runtime(runtime_name, order, seed);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    GpuBackend gpu_backend(std::move(rt));
    gpu_backend.set_prefill_min_tokens(CHECK_TILED_FROM);
    for (const Case& cs : cases()) {
      if (!filter.empty() && cs.name.find(filter) == std::string::npos) continue;
      std::vector<uint64_t> before = gpu_backend.dispatches_by_kernel();
      Ctx ctx{cpu, gpu_backend, Rng(seed * 7919u + uint32_t(std::hash<std::string>()(cs.name))), ""};
      std::string failure;
      try {
        cs.run(ctx);
        gpu_backend.synchronize();
      } catch (const std::exception& e) {
        failure = cs.name + ": " + e.what();
        ++failed_cases;
        try {
          gpu_backend.synchronize();
        } catch (const std::exception&) {
        }
      }
      const std::vector<uint64_t>& after = gpu_backend.dispatches_by_kernel();
      for (size_t k = 0; k < after.size(); ++k) {
        if (after[k] == before[k]) continue;
        report[k].orders.insert(order);
        if (!ctx.shape.empty()) report[k].shapes.insert(ctx.shape);
        if (!failure.empty() && report[k].failure.empty()) report[k].failure = "[" + order + "] " + failure;
      }
      if (!failure.empty()) std::fprintf(stderr, "FAIL [%s] %s\n", order.c_str(), failure.c_str());
    }
  }

  int bad = 0;
  for (int k = 0; k < gpu::kernels::kCount; ++k) {
    const KernelReport& r = report[size_t(k)];
    std::string shapes, ords;
    for (const std::string& s : r.shapes) shapes += (shapes.empty() ? "" : "; ") + s;
    for (const std::string& o : orders)
      if (r.orders.count(o)) ords += (ords.empty() ? "" : ",") + o;
    std::string status = r.orders.empty() ? "NO TEST" : !r.failure.empty() ? "FAIL " + r.failure
                                                       : r.orders.size() < orders.size() ? "NOT RUN IN EVERY ORDER" : "ok";
    if (status != "ok" && filter.empty()) ++bad;
    if (!filter.empty() && r.orders.empty()) continue;
    std::printf("%-18s shapes: %s | orders: %s | %s\n", gpu::kernels::kInfo[k].name, shapes.empty() ? "-" : shapes.c_str(),
                ords.empty() ? "-" : ords.c_str(), status.c_str());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d kernels, %d failing or untested, %d failed cases, runtime %s, %.1f s\n", gpu::kernels::kCount, bad,
              failed_cases, runtime_name.c_str(), secs);
  return bad == 0 && failed_cases == 0 ? 0 : 1;
}

