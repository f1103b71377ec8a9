// moelens-cuda-matrix-check: the self-test's simdgroup matrix kernels (broken.metal: simdgroup_matrices,
// simdgroup_matrix_pair, simdgroup_matrix_16x16) translated to CUDA and run on the GPU: the tensor-core
// mapping of simdgroup_load (origin, transpose, rows 4-byte aligned or not), simdgroup_load4 (ldmatrix),
// simdgroup_multiply_accumulate(_pair, _16x16) and simdgroup_store must give the exact products the
// emulator gives.
#include <cstdio>
#include <vector>

#include "broken.cu"

// Runs `kernel` on 64 threads over `in`; the results (as many floats), or an empty vector on a CUDA error.
template <class Kernel>
static std::vector<float> run(Kernel kernel, const std::vector<float>& in) {
  std::vector<float> out(in.size());
  float* d = nullptr;
  if (cudaMalloc(&d, in.size() * sizeof(float)) != cudaSuccess) return std::fprintf(stderr, "cudaMalloc failed\n"), std::vector<float>();
  cudaMemcpy(d, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice);
  kernel<<<1, 64>>>(d);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return std::fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(e)), std::vector<float>();
  cudaMemcpy(out.data(), d, out.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d);
  return out;
}

int main() {
  std::vector<float> in(256);
  for (size_t j = 0; j < 256; ++j) in[j] = float(int(j * 7 % 13) - 6) * 0.25f;  // exact in half
  std::vector<float> out = run(msl_file_broken::simdgroup_matrices, in);
  if (out.empty()) return 2;
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

  std::vector<float> pair_in(256, 0.0f);
  for (size_t j = 0; j < 192; ++j) pair_in[j] = float(int(j * 5 % 11) - 5) * 0.5f;
  out = run(msl_file_broken::simdgroup_matrix_pair, pair_in);
  if (out.empty()) return 2;
  int pair_wrong = 0;
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        double want = r < 8 ? 0.5 : 0.25;
        for (int k = 0; k < 8; ++k) want += double(pair_in[size_t(r * 8 + k)]) * double(pair_in[size_t(128 + k * 8 + n)]);
        const double got = out[size_t((s * 16 + r) * 8 + n)];
        if (got != want && pair_wrong++ < 8)
          std::fprintf(stderr, "pair: simdgroup %d row %d column %d: %g, want %g\n", s, r, n, got, want);
      }
  std::printf("%s: simdgroup_multiply_accumulate_pair, loads from rows 4-byte aligned or not, on CUDA (%d of 256 wrong)\n",
              pair_wrong ? "FAIL" : "ok", pair_wrong);

  std::vector<float> wide_in(512);
  for (size_t j = 0; j < 512; ++j) wide_in[j] = float(int(j * 7 % 13) - 6) * 0.25f;
  out = run(msl_file_broken::simdgroup_matrix_16x16, wide_in);
  if (out.empty()) return 2;
  int wide_wrong = 0;
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 16; ++n) {
        double want = r < 8 ? 0.5 : 0.25;
        for (int k = 0; k < 16; ++k) want += double(wide_in[size_t(r * 16 + k)]) * double(wide_in[size_t(256 + k * 16 + n)]);
        const double got = out[size_t(s * 256 + r * 16 + n)];
        if (got != want && wide_wrong++ < 8)
          std::fprintf(stderr, "16x16: simdgroup %d row %d column %d: %g, want %g\n", s, r, n, got, want);
      }
  std::printf("%s: simdgroup_load4 (origin, transpose), simdgroup_multiply_accumulate_16x16 on CUDA (%d of 512 wrong)\n",
              wide_wrong ? "FAIL" : "ok", wide_wrong);
  return wrong || pair_wrong || wide_wrong ? 1 : 0;
}
