#include "runtimes.h"

#include "../../core/error.h"
#include "emu_runtime.h"

namespace moelens::gpu {

#if defined(MOELENS_HAS_METAL)
std::unique_ptr<Runtime> make_metal_runtime();
#endif
#if defined(MOELENS_HAS_CUDA)
std::unique_ptr<Runtime> make_cuda_runtime();
#endif

std::string available_runtimes() {
  std::string s = "emulator";
#if defined(MOELENS_HAS_METAL)
  s += ", metal";
#endif
#if defined(MOELENS_HAS_CUDA)
  s += ", cuda";
#endif
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
