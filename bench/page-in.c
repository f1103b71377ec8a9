// Reads files into the page cache (mmap, one load per page), so that an engine's timed runs do not
// read weights from disk that the other engine's runs evicted: two 19 GB checkpoints do not fit in
// memory together. The mapping asks for huge pages, as moelens' loader does, so that what is read
// lands in 2 MB page-cache folios that a huge-page mapping can use; --drop first evicts the files
// (clean pages only), so that nothing read earlier in 4 KB folios stays. Compiled on the fly by
// bench/page-in.ts. Usage: page-in [--drop] FILE...; prints one JSON line.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int drop = argc > 1 && !strcmp(argv[1], "--drop");
  if (argc < 2 + drop) {
    fprintf(stderr, "usage: page-in [--drop] FILE...\n");
    return 2;
  }
  const double t0 = now();
  uint64_t bytes = 0, sum = 0;
  for (int i = 1 + drop; i < argc; ++i) {
    int fd = open(argv[i], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      perror(argv[i]);
      return 1;
    }
    if (drop) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (st.st_size > 0) {
      const volatile uint8_t* p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        perror(argv[i]);
        return 1;
      }
      madvise((void*)p, (size_t)st.st_size, MADV_HUGEPAGE);
      for (off_t at = 0; at < st.st_size; at += 4096) sum += p[at];
      munmap((void*)p, (size_t)st.st_size);
      bytes += (uint64_t)st.st_size;
    }
    close(fd);
  }
  printf("{\"files\":%d,\"bytes\":%llu,\"seconds\":%.3f,\"checksum\":%llu}\n", argc - 1 - drop, (unsigned long long)bytes, now() - t0,
         (unsigned long long)sum);
  return 0;
}
