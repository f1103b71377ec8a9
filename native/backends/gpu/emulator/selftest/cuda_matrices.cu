// moelens-cuda-matrix-check: the self-test's simdgroup matrix kernel (broken.metal, simdgroup_matrices)
// translated to CUDA and run on the GPU: the tensor-core mapping of simdgroup_load (origin, transpose),
// simdgroup_multiply_accumulate and simdgroup_store must give the exact products the emulator gives.
#include <cstdio>
#include <vector>

#include "broken.cu"

int main() {
  std::vector<float> in(256), out(256);
  for (size_t j = 0; j < 256; ++j) in[j] = float(int(j * 7 % 13) - 6) * 0.25f;  // exact in half
  float* d = nullptr;
  if (cudaMalloc(&d, 256 * sizeof(float)) != cudaSuccess) return std::fprintf(stderr, "cudaMalloc failed\n"), 2;
  cudaMemcpy(d, in.data(), 256 * sizeof(float), cudaMemcpyHostToDevice);
  msl_file_broken::simdgroup_matrices<<<1, 64>>>(d);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return std::fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(e)), 2;
  cudaMemcpy(out.data(), d, 256 * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d);
  int wrong = 0;
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < 8; ++r)
      for (int n = 0; n < 8; ++n) {
        double want = 0.5;
        for (int k = 0; k < 16; ++k) want += double(in[size_t(r * 16 + k)]) * double(in[size_t(128 + k * 8 + n)]);
        const double got = out[size_t((s * 8 + r) * 8 + n)];
        if (got != want && wrong++ < 8)
          std::fprintf(stderr, "simdgroup %d row %d column %d: %g, want %g\n", s, r, n, got, want);
      }
  std::printf("%s: simdgroup_load (origin, transpose), simdgroup_multiply_accumulate, simdgroup_store on CUDA (%d of 128 wrong)\n",
              wrong ? "FAIL" : "ok", wrong);
  return wrong ? 1 : 0;
}
