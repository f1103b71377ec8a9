// Gated DeltaNet kernels of the CPU backend: causal conv + SiLU, the gated delta rule (recurrent form,
// fp32 state), and the gated RMSNorm. Math: model-reference.md §2.3.
#include <cmath>
#include <cstring>
#include <vector>

#include "activations.h"
#include "cpu_backend.h"
#include "dot.h"

namespace moelens {

using namespace cpu;

namespace {
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold
}  // namespace

void CpuBackend::conv_silu(View x, View state, View weights, int n, int channels, int kernel, View out) {
  const int past = kernel - 1;
  const float* xs = f32(x);
  float* st = f32(state);
  const float* w = f32(weights);
  float* o = f32(out);
  // Row r of the stream [state ; x]: r < past comes from the state.
  auto stream = [&](int r, int c) { return r < past ? st[size_t(r) * channels + c] : xs[size_t(r - past) * channels + c]; };
  pool_.parallel_for(size_t(channels), grain_for(size_t(n) * kernel), [&](size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; ++c) {
      const float* wc = w + c * kernel;
      for (int t = 0; t < n; ++t) {
        float acc = 0.f;
        for (int j = 0; j < kernel; ++j) acc += wc[j] * stream(t + j, int(c));
        o[size_t(t) * channels + c] = silu(acc);
      }
      // The new state: the last `past` rows of the stream (raw, pre-conv inputs).
      float keep[16];
      for (int j = 0; j < past; ++j) keep[j] = stream(n + j, int(c));
      for (int j = 0; j < past; ++j) st[size_t(j) * channels + c] = keep[j];
    }
  });
}

void CpuBackend::deltanet(View qkv, View b, View a, View A_log, View dt_bias, View state, int n, const DeltaNetShape& s,
                          View out, const DeltaNetTrace& trace) {
  const int Dk = s.key_dim, Dv = s.value_dim, Hv = s.value_heads;
  const int key_total = s.key_heads * Dk;
  const int conv_dim = 2 * key_total + Hv * Dv;
  const int group = Hv / s.key_heads;
  const float q_scale = 1.0f / std::sqrt(float(Dk));
  pool_.parallel_for(size_t(Hv), grain_for(size_t(n) * Dk * Dv * 4), [&](size_t h0, size_t h1) {
    std::vector<float> q(static_cast<size_t>(Dk)), k(static_cast<size_t>(Dk)), m(static_cast<size_t>(Dv)), delta(static_cast<size_t>(Dv));
    for (size_t hv = h0; hv < h1; ++hv) {
      const int kh = int(hv) / group;  // V head j uses Q/K head j / (Hv/Hk)
      float* S = f32(state) + hv * size_t(Dk) * Dv;
      const float neg_A = -std::exp(f32(A_log)[hv]);
      for (int t = 0; t < n; ++t) {
        const float* row = f32(qkv) + size_t(t) * conv_dim;
        const float* qr = row + kh * Dk;
        const float* kr = row + key_total + kh * Dk;
        const float* vr = row + 2 * key_total + hv * Dv;
        float qn = 1.0f / std::sqrt(dot_f32(qr, qr, Dk) + s.eps);
        float kn = 1.0f / std::sqrt(dot_f32(kr, kr, Dk) + s.eps);
        for (int i = 0; i < Dk; ++i) {
          q[i] = qr[i] * qn * q_scale;
          k[i] = kr[i] * kn;
        }
        const float beta = 1.0f / (1.0f + std::exp(-f32(b)[size_t(t) * Hv + hv]));
        const float g = neg_A * softplus(f32(a)[size_t(t) * Hv + hv] + f32(dt_bias)[hv]);
        const float decay = std::exp(g);
        // S = decay·S; m = Sᵀk; δ = β(v − m); S += k⊗δ; o = Sᵀq
        std::fill(m.begin(), m.end(), 0.f);
        for (int i = 0; i < Dk; ++i) {
          float* Si = S + size_t(i) * Dv;
          for (int j = 0; j < Dv; ++j) Si[j] *= decay;
          axpy(k[i], Si, m.data(), Dv);
        }
        for (int j = 0; j < Dv; ++j) delta[j] = beta * (vr[j] - m[j]);
        float* o = f32(out) + size_t(t) * Hv * Dv + hv * Dv;
        std::fill(o, o + Dv, 0.f);
        float norm2 = 0.f;
        for (int i = 0; i < Dk; ++i) {
          float* Si = S + size_t(i) * Dv;
          axpy(k[i], delta.data(), Si, Dv);
          axpy(q[i], Si, o, Dv);
          if (trace.state_norm) norm2 += dot_f32(Si, Si, Dv);
        }
        if (trace.beta) f32(trace.beta)[size_t(t) * Hv + hv] = beta;
        if (trace.decay) f32(trace.decay)[size_t(t) * Hv + hv] = decay;
        if (trace.state_norm) f32(trace.state_norm)[size_t(t) * Hv + hv] = std::sqrt(norm2);
      }
    }
  });
}

void CpuBackend::gated_rms_norm(View x, View z, View weight, int rows, int dim, float eps, View out) {
  const float* w = f32(weight);
  pool_.parallel_for(size_t(rows), grain_for(size_t(dim) * 4), [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = f32(x) + r * dim;
      const float* zr = f32(z) + r * dim;
      float* o = f32(out) + r * dim;
      float inv = 1.0f / std::sqrt(dot_f32(xr, xr, dim) / float(dim) + eps);
      for (int i = 0; i < dim; ++i) o[i] = w[i] * (xr[i] * inv) * silu(zr[i]);
    }
  });
}

}  // namespace moelens
