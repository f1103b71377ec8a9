// What the stand-alone CUDA design studies of bench/gpu share: a CUDA error stops the program with its
// place, and a launch timed by events.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Timing {
  float best_ms, mean_ms;
};

// `launch()` once to warm up, then `reps` times, each between two events.
template <class Launch>
Timing time_launches(Launch launch, int reps = 10) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  launch();
  CHECK(cudaDeviceSynchronize());
  Timing t{1e30f, 0.0f};
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.best_ms = ms < t.best_ms ? ms : t.best_ms;
    t.mean_ms += ms / reps;
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return t;
}
