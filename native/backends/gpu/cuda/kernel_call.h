// One translated kernel as the CUDA runtime launches it: the kernel function and the addresses of its
// arguments (cudaLaunchKernel and graph kernel nodes both take this form). Filled by the describer
// that msl-translate --cuda generates per kernel from a KernelLaunch, whose storage the addresses
// point into.
#pragma once

#include "../launch.h"

namespace moelens::gpu {

struct CudaKernelCall {
  const void* func = nullptr;
  void* args[kMaxBindings + 1] = {};
  int count = 0;
};

}  // namespace moelens::gpu
