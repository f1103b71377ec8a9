#include "registry.h"

#include "../core/error.h"
#include "cpu/cpu_backend.h"
#include "gpu/gpu_backend.h"
#include "gpu/runtimes.h"

namespace moelens {

std::vector<std::string> backend_names() {
  std::vector<std::string> names = {"cpu"};
  for (const std::string& r : gpu::runtime_names()) names.push_back(r);
  return names;
}

namespace {

std::unique_ptr<Backend> make_unconfigured(const std::string& name, const BackendOptions& o) {
  if (name == "cpu") {
    cpu::Precision p = cpu::Precision::F32;
    if (!o.precision.empty() && !cpu::parse_precision(o.precision, &p))
      fail("precision '", o.precision, "' is not a mode of the cpu backend (fp32, int24, int16 or int8)");
    if (o.prefill_min_tokens != 0) fail("prefill_min_tokens is an option of the GPU backends, not of the cpu backend");
    return std::make_unique<CpuBackend>(o.threads, p);
  }
  for (const std::string& r : gpu::runtime_names()) {
    if (r != name) continue;
    gpu::Precision p = gpu::Precision::F32;
    cpu::Precision cpu_mode;
    if (!o.precision.empty() && !gpu::parse_precision(o.precision, &p)) {
      if (cpu::parse_precision(o.precision, &cpu_mode))
        fail("precision '", o.precision, "' is a mode of the cpu backend, not of '", name, "' (it has fp16 and fp32)");
      fail("unknown precision '", o.precision, "' for the ", name, " backend (fp16 or fp32)");
    }
    auto gpu = std::make_unique<gpu::GpuBackend>(gpu::make_runtime(name, o.order, o.seed), p);
    if (o.prefill_min_tokens != 0) gpu->set_prefill_min_tokens(o.prefill_min_tokens);
    return gpu;
  }
  std::string all;
  for (const std::string& n : backend_names()) all += (all.empty() ? "" : ", ") + n;
  if (name == "cuda")
    fail("this build has no cuda backend (it has: ", all, "); build it where nvcc is, with MOELENS_CUDA=1 npm install "
         "(or cmake -DMOELENS_CUDA=ON)");
  fail("unknown backend '", name, "' (this build has: ", all, ")");
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& o) {
  if (o.prefill_chunk < 0) fail("prefill chunk of ", o.prefill_chunk, " tokens (a positive count, or 0 for the default)");
  if (o.prefill_min_tokens < 0)
    fail("prefill_min_tokens of ", o.prefill_min_tokens, " (a positive count of tokens, or 0 for the default)");
  std::unique_ptr<Backend> b = make_unconfigured(name, o);
  b->set_prefill_chunk(o.prefill_chunk);
  return b;
}

}  // namespace moelens
