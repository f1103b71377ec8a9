#include "runtimes.h"

#include "../../core/error.h"
#include "emulator/emu_runtime.h"

namespace moelens::gpu {

#if defined(MOELENS_HAS_METAL)
std::unique_ptr<Runtime> make_metal_runtime();
#endif
#if defined(MOELENS_HAS_CUDA)
std::unique_ptr<Runtime> make_cuda_runtime();
#endif

std::vector<std::string> runtime_names() {
  std::vector<std::string> names = {"emulator"};
#if defined(MOELENS_HAS_METAL)
  names.push_back("metal");
#endif
#if defined(MOELENS_HAS_CUDA)
  names.push_back("cuda");
#endif
  return names;
}

std::string available_runtimes() {
  std::string s;
  for (const std::string& n : runtime_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::unique_ptr<Runtime> make_runtime(const std::string& name, const std::string& order, uint64_t seed) {
  if (name == "emulator") {
    msl_emu::Order o;
    if (!msl_emu::parse_order(order, &o)) fail("unknown thread order '", order, "' (forward, reverse, random)");
    return std::make_unique<EmuRuntime>(o, seed);
  }
#if defined(MOELENS_HAS_METAL)
  if (name == "metal") return make_metal_runtime();
#endif
#if defined(MOELENS_HAS_CUDA)
  if (name == "cuda") return make_cuda_runtime();
#endif
  fail("runtime '", name, "' is not in this build (it has: ", available_runtimes(), ")");
}

}  // namespace moelens::gpu
