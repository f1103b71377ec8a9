// One translated kernel as the CUDA runtime launches it: the kernel function and the addresses of its
// arguments (cudaLaunchKernel and graph kernel nodes both take this form). Filled by the describer
// that msl-translate --cuda generates per kernel from a KernelLaunch, whose storage the addresses
// point into.
#pragma once

#include "../launch.h"

namespace moelens::gpu {

struct CudaKernelCall {
  const void* func = nullptr;
  void* args[kMaxBindings + 2] = {};  // the bindings, then the kernel's early_dependents
  int count = 0;
  // 1: the kernel lets the next one launch as soon as its blocks pass their wait at entry (a decode
  // step's kernels, about one wave each); 0: only as its blocks exit (a prompt chunk's, whose next
  // kernel's blocks would otherwise take the first SMs to free up while this kernel still has waves to
  // start). See msl_cuda::await_previous_kernel.
  uint32_t early_dependents = 0;
};

}  // namespace moelens::gpu
