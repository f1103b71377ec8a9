// Gated attention kernels of the CPU backend: q/gate split, q/k RMSNorm, partial NeoX RoPE, and causal
// GQA attention over the KV cache. Math: docs/model.md §2.4.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "activations.h"
#include "cpu_backend.h"
#include "dot.h"

namespace moelens {

using namespace cpu;

void CpuBackend::attention_prep(View qg, View k, View v, View q_norm, View k_norm, int n, int pos0,
                                const AttentionShape& s, View q, View gate, View k_rows, View v_rows) {
  const int D = s.head_dim, R = s.rotary_dim, half = R / 2;
  const int q_stride = s.gated ? 2 * D : D;
  // inv_freq and angles in fp32, as transformers computes them.
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq[i] = 1.0f / std::pow(float(s.rope_theta), float(2 * i) / float(R));
  auto norm_rope = [&](float* v, const float* w, int pos) {
    float inv = 1.0f / std::sqrt(dot_f32(v, v, D) / float(D) + s.eps);
    for (int i = 0; i < D; ++i) v[i] = v[i] * inv * w[i];
    for (int i = 0; i < half; ++i) {
      float ang = float(pos) * inv_freq[i];
      float c = std::cos(ang), sn = std::sin(ang);
      float x1 = v[i], x2 = v[i + half];
      v[i] = x1 * c - x2 * sn;
      v[i + half] = x2 * c + x1 * sn;
    }
  };
  for (int t = 0; t < n; ++t) {
    const int pos = pos0 + t;
    for (int h = 0; h < s.heads; ++h) {
      const float* src = f32(qg) + (size_t(t) * s.heads + h) * q_stride;
      float* qd = f32(q) + (size_t(t) * s.heads + h) * D;
      std::copy(src, src + D, qd);
      if (s.gated) std::copy(src + D, src + 2 * D, f32(gate) + (size_t(t) * s.heads + h) * D);
      norm_rope(qd, f32(q_norm), pos);
    }
    for (int h = 0; h < s.kv_heads; ++h) norm_rope(f32(k) + (size_t(t) * s.kv_heads + h) * D, f32(k_norm), pos);
  }
  if (k_rows) {
    const size_t count = size_t(n) * s.kv_heads * D;
    std::memmove(f32(k_rows), f32(k), count * 4);
    std::memmove(f32(v_rows), f32(v), count * 4);
  }
}

void CpuBackend::attention(View q, View k_cache, View v_cache, int n, int pos0, const AttentionShape& s, View out,
                           View probs, View gate) {
  const int D = s.head_dim, H = s.heads, group = s.heads / s.kv_heads;
  const int kv_width = s.kv_heads * D;
  const int total = pos0 + n;
  const float scale = 1.0f / std::sqrt(float(D));
  pool_.parallel_for(size_t(n) * H, grain_for(size_t(total) * D * 2), [&](size_t i0, size_t i1) {
    std::vector<float> p(static_cast<size_t>(total));
    for (size_t i = i0; i < i1; ++i) {
      const int t = int(i / H), h = int(i % H), kvh = h / group;
      const int len = pos0 + t + 1;  // causal: keys 0 .. pos0+t
      const float* qv = f32(q) + (size_t(t) * H + h) * D;
      float mx = -INFINITY;
      for (int j = 0; j < len; ++j) {
        p[j] = scale * dot_f32(qv, f32(k_cache) + size_t(j) * kv_width + kvh * D, D);
        mx = std::max(mx, p[j]);
      }
      float sum = 0.f;
      for (int j = 0; j < len; ++j) sum += (p[j] = std::exp(p[j] - mx));
      float* o = f32(out) + (size_t(t) * H + h) * D;
      for (int j = 0; j < len; ++j) p[j] /= sum;
      weighted_rows_sum(p.data(), f32(v_cache) + kvh * D, kv_width, len, D, o);
      if (gate) {
        const float* g = f32(gate) + (size_t(t) * H + h) * D;
        for (int d = 0; d < D; ++d) o[d] *= sigmoid(g[d]);
      }
      if (probs) {
        float* pr = f32(probs) + (size_t(h) * n + t) * total;
        std::copy(p.begin(), p.begin() + len, pr);
        std::fill(pr + len, pr + total, 0.f);
      }
    }
  });
}

}  // namespace moelens
