// Greedy decoding on the device: the arg-max of each logits row.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

void GpuBackend::argmax(View logits, int rows, int vocab, View ids) {
  auto lock = enter();
  const uint32_t parts = ceil_div(size_t(vocab), ARGMAX_PART_LEN);
  shader::ArgmaxParams p{u32(size_t(rows), "rows"), u32(size_t(vocab), "vocabulary"), parts, ARGMAX_PART_LEN};
  const size_t slots = size_t(p.n) * parts;
  scratch(argmax_parts_, 2 * slots);  // the best value of each slice, then its index
  const View part_v(argmax_parts_.get()), part_i(argmax_parts_.get(), slots);
  namespace ap = k::argmax_partial;
  Call(*this, ap::id).buf(ap::logits, logits).buf(ap::part_v, part_v).buf(ap::part_i, part_i).params(ap::p, p)
      .grid(parts, p.n).threads(REDUCE_THREADS).run();
  namespace a = k::argmax;
  Call(*this, a::id).buf(a::part_v, part_v).buf(a::part_i, part_i).buf(a::ids, ids).params(a::p, p).grid(p.n)
      .threads(REDUCE_THREADS).run();
}

}  // namespace moelens::gpu
