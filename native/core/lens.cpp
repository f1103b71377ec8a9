#include "lens.h"

#include "error.h"

namespace moelens {

std::vector<float> unembed(const Model& model, const float* x, int n, bool apply_norm) {
  const ModelConfig& c = model.config();
  if (n <= 0) fail("unembed: no rows given");
  Backend& be = model.backend();
  const size_t H = size_t(c.hidden_size), V = size_t(c.vocab_size);
  auto in = be.alloc(ElemType::F32, size_t(n) * H);
  auto out = be.alloc(ElemType::F32, size_t(n) * V);
  be.write(in, x, size_t(n) * H);
  if (apply_norm) be.rms_norm(in, model.final_norm(), n, int(H), c.rms_norm_eps, in);
  be.matmul_group({{&model.lm_head(), out, true}}, in, n);  // exact, as the forward call's logits
  be.synchronize();
  std::vector<float> logits(size_t(n) * V);
  be.read(out, logits.data(), logits.size());
  return logits;
}

}  // namespace moelens
