// Measures the machine's sustained memory read bandwidth: T threads each sum their own slice of a
// buffer much larger than the caches, and the fastest of several passes counts. Compiled on the fly by
// bench/read-bandwidth.ts. Usage: read-bandwidth [--threads T] [--mib N] [--passes P]; prints one JSON line.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const uint64_t* data;
  size_t count;
  uint64_t sum;
} Slice;

static pthread_barrier_t start_line, finish_line;
static int passes = 10;
static double pass_seconds[64];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void* reader(void* arg) {
  Slice* s = (Slice*)arg;
  for (int p = 0; p < passes; ++p) {
    pthread_barrier_wait(&start_line);
    uint64_t sum = 0;
    for (size_t i = 0; i < s->count; ++i) sum += s->data[i];  // vectorized by -O3
    s->sum += sum;
    pthread_barrier_wait(&finish_line);
  }
  return NULL;
}

static int compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  int threads = 2;
  size_t mib = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mib")) mib = (size_t)atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--passes")) passes = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: read-bandwidth [--threads T] [--mib N] [--passes P]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 256 || passes < 1 || passes > 64 || mib < 1) {
    fprintf(stderr, "read-bandwidth: threads 1..256, passes 1..64, mib >= 1\n");
    return 2;
  }
  size_t bytes = mib << 20, count = bytes / sizeof(uint64_t);
  uint64_t* data = aligned_alloc(4096, bytes);
  if (!data) {
    fprintf(stderr, "read-bandwidth: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  for (size_t i = 0; i < count; ++i) data[i] = i;  // fault every page in before timing

  pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&finish_line, NULL, (unsigned)threads + 1);
  Slice* slices = calloc((size_t)threads, sizeof(Slice));
  pthread_t* ids = calloc((size_t)threads, sizeof(pthread_t));
  for (int t = 0; t < threads; ++t) {
    size_t first = count * (size_t)t / (size_t)threads, last = count * (size_t)(t + 1) / (size_t)threads;
    slices[t].data = data + first;
    slices[t].count = last - first;
    pthread_create(&ids[t], NULL, reader, &slices[t]);
  }
  for (int p = 0; p < passes; ++p) {
    pthread_barrier_wait(&start_line);
    double t0 = now();
    pthread_barrier_wait(&finish_line);
    pass_seconds[p] = now() - t0;
  }
  uint64_t checksum = 0;
  for (int t = 0; t < threads; ++t) {
    pthread_join(ids[t], NULL);
    checksum += slices[t].sum;
  }
  qsort(pass_seconds, (size_t)passes, sizeof(double), compare);
  printf("{\"threads\":%d,\"mib\":%zu,\"passes\":%d,\"best_gb_s\":%.3f,\"median_gb_s\":%.3f,\"checksum\":%llu}\n", threads,
         mib, passes, bytes / pass_seconds[0] / 1e9, bytes / pass_seconds[passes / 2] / 1e9, (unsigned long long)checksum);
  return 0;
}
