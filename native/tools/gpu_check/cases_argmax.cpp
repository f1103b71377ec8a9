// moelens-gpu-check: greedy arg-max with ties and NaNs.
#include "check.h"

namespace moelens::gpu_check {

void add_argmax_cases(Cases& all) {
  const CaseAdder add{all};

  add("argmax", [](Ctx& c) {
    // 5000 logits: three slices of the first pass; ties inside a slice and across slices.
    c.shape = "4 rows of 5000: ties within and across slices, NaNs, all -inf";
    const int n = 4, vocab = 5000;
    std::vector<float> v = c.rng.normals(size_t(n) * vocab);
    v[size_t(vocab) + 10] = v[size_t(vocab) + 500] = v[size_t(vocab) + 4500] = 9.0f;  // the first wins
    v[2 * size_t(vocab) + 4999] = 9.0f;
    v[2 * size_t(vocab) + 3] = NAN;  // never wins
    std::fill_n(&v[2 * size_t(vocab)], 2048, NAN);  // a slice of NaNs only
    std::fill_n(&v[3 * size_t(vocab)], vocab, -INFINITY);
    Pair logits = c.floats(v), ids = c.ints({-1, -1, -1, -1});
    c.cpu.argmax(View(logits.cpu.get()), n, vocab, View(ids.cpu.get()));
    c.gpu.argmax(View(logits.gpu.get()), n, vocab, View(ids.gpu.get()));
    std::vector<int32_t> want(n), got(n);
    c.cpu.read(View(ids.cpu.get()), want.data(), n);
    c.gpu.read(View(ids.gpu.get()), got.data(), n);
    const int32_t expected[] = {-2, 10, 4999, 0};  // row 0: random, so only the backends' agreement
    for (int t = 0; t < n; ++t)
      if (got[size_t(t)] != want[size_t(t)] || (expected[t] >= 0 && want[size_t(t)] != expected[t]))
        throw Failure("argmax row " + std::to_string(t) + ": gpu " + std::to_string(got[size_t(t)]) + ", cpu " +
                      std::to_string(want[size_t(t)]));
  });
}

}  // namespace moelens::gpu_check
