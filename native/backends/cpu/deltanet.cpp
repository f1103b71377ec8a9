// Gated DeltaNet kernels of the CPU backend: causal conv + SiLU, the gated delta rule (recurrent form,
// fp32 state), and the gated RMSNorm. Math: docs/model.md §2.3.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "activations.h"
#include "cpu_backend.h"
#include "dot.h"

namespace moelens {

using namespace cpu;

namespace {
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold

// One token of the gated delta rule on one head's state S (Dk rows of Dv):
//   m = decay·Sᵀk;  δ = β(v − m);  S = decay·S + k⊗δ;  o = Sᵀq
// in two passes over S (the first only reads it). Returns |S|² after the update.
float delta_step_generic(float* S, int Dk, int Dv, const float* q, const float* k, const float* v, float beta,
                         float decay, float* m, float* delta, float* o) {
  std::fill(m, m + Dv, 0.f);
  for (int i = 0; i < Dk; ++i)
    for (int j = 0; j < Dv; ++j) m[j] += k[i] * S[size_t(i) * Dv + j];
  for (int j = 0; j < Dv; ++j) delta[j] = beta * (v[j] - decay * m[j]);
  std::fill(o, o + Dv, 0.f);
  float norm2 = 0.f;
  for (int i = 0; i < Dk; ++i) {
    float* Si = S + size_t(i) * Dv;
    for (int j = 0; j < Dv; ++j) {
      Si[j] = decay * Si[j] + k[i] * delta[j];
      o[j] += q[i] * Si[j];
      norm2 += Si[j] * Si[j];
    }
  }
  return norm2;
}

#if defined(__AVX512F__)
// The same with m, δ, o and |S|² in registers: V vectors of 16 columns (Dv = 16·V).
template <int V>
float delta_step_avx512(float* S, int Dk, const float* q, const float* k, const float* v, float beta, float decay, float* o) {
  __m512 acc[V], d[V];
  for (int c = 0; c < V; ++c) acc[c] = _mm512_setzero_ps();
  for (int i = 0; i < Dk; ++i) {
    const __m512 ki = _mm512_set1_ps(k[i]);
    for (int c = 0; c < V; ++c) acc[c] = _mm512_fmadd_ps(ki, _mm512_loadu_ps(S + size_t(i) * 16 * V + 16 * c), acc[c]);
  }
  const __m512 b = _mm512_set1_ps(beta), g = _mm512_set1_ps(decay);
  for (int c = 0; c < V; ++c) {
    d[c] = _mm512_mul_ps(b, _mm512_fnmadd_ps(g, acc[c], _mm512_loadu_ps(v + 16 * c)));
    acc[c] = _mm512_setzero_ps();
  }
  __m512 norm2 = _mm512_setzero_ps();
  for (int i = 0; i < Dk; ++i) {
    float* Si = S + size_t(i) * 16 * V;
    const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
    for (int c = 0; c < V; ++c) {
      const __m512 s = _mm512_fmadd_ps(g, _mm512_loadu_ps(Si + 16 * c), _mm512_mul_ps(ki, d[c]));
      _mm512_storeu_ps(Si + 16 * c, s);
      acc[c] = _mm512_fmadd_ps(qi, s, acc[c]);
      norm2 = _mm512_fmadd_ps(s, s, norm2);
    }
  }
  for (int c = 0; c < V; ++c) _mm512_storeu_ps(o + 16 * c, acc[c]);
  return _mm512_reduce_add_ps(norm2);
}
#endif

float delta_step(float* S, int Dk, int Dv, const float* q, const float* k, const float* v, float beta, float decay,
                 float* m, float* delta, float* o) {
#if defined(__AVX512F__)
  switch (Dv) {
    case 64: return delta_step_avx512<4>(S, Dk, q, k, v, beta, decay, o);
    case 128: return delta_step_avx512<8>(S, Dk, q, k, v, beta, decay, o);
    default: break;
  }
#endif
  return delta_step_generic(S, Dk, Dv, q, k, v, beta, decay, m, delta, o);
}
}  // namespace

void CpuBackend::conv_silu(View x, View state, View weights, int n, int channels, int kernel, View out) {
  const int past = kernel - 1;
  const float* xs = f32(x);
  float* st = f32(state);
  const float* w = f32(weights);
  float* o = f32(out);
  // Row r of the stream [state ; x]: r < past comes from the state.
  auto stream = [&](int r) { return r < past ? st + size_t(r) * channels : xs + size_t(r - past) * channels; };
  // Work per channel: n·kernel multiply-adds and n exponentials (counted as 16 each), so that decode's
  // single token still splits its 8192 channels across the threads.
  pool_.parallel_for(size_t(channels), grain_for(size_t(n) * size_t(kernel + 16)), [&](size_t c0, size_t c1) {
    const int width = int(c1 - c0);
    if (n == 1) {  // decode: each channel's taps where they are (a transposed copy would cost as much as the conv)
      for (size_t c = c0; c < c1; ++c) {
        float acc = 0.f;
        for (int j = 0; j < kernel; ++j) acc += w[c * kernel + j] * stream(j)[c];
        o[c] = acc;
      }
      silu_inplace(o + c0, width);
      for (int j = 0; j < past; ++j) std::memmove(st + size_t(j) * channels + c0, stream(1 + j) + c0, size_t(width) * 4);
      return;
    }
    // Token by token across the chunk's channels (rows are contiguous), with the taps transposed to match.
    thread_local std::vector<float> taps;
    taps.resize(size_t(kernel) * width);
    for (int c = 0; c < width; ++c)
      for (int j = 0; j < kernel; ++j) taps[size_t(j) * width + c] = w[(c0 + c) * kernel + j];
    for (int t = 0; t < n; ++t) {
      float* oc = o + size_t(t) * channels + c0;
      for (int c = 0; c < width; ++c) oc[c] = 0.f;
      for (int j = 0; j < kernel; ++j) {
        const float* src = stream(t + j) + c0;
        const float* tap = taps.data() + size_t(j) * width;
        for (int c = 0; c < width; ++c) oc[c] += tap[c] * src[c];
      }
      silu_inplace(oc, width);
    }
    // The new state: the last `past` rows of the stream (raw, pre-conv inputs). Row j moves from row
    // n + j >= j, so going up never overwrites a row still to be read.
    for (int j = 0; j < past; ++j) std::memmove(st + size_t(j) * channels + c0, stream(n + j) + c0, size_t(width) * 4);
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
        float* o = f32(out) + size_t(t) * Hv * Dv + hv * Dv;
        const float norm2 = delta_step(S, Dk, Dv, q.data(), k.data(), vr, beta, decay, m.data(), delta.data(), o);
        if (trace.beta) f32(trace.beta)[size_t(t) * Hv + hv] = beta;
        if (trace.decay) f32(trace.decay)[size_t(t) * Hv + hv] = decay;
        if (trace.state_norm) f32(trace.state_norm)[size_t(t) * Hv + hv] = std::sqrt(norm2);
      }
    }
  });
}

void CpuBackend::gated_rms_norm(View x, View z, View weight, int rows, int dim, float eps, View out) {
  const float* w = f32(weight);
  // Work per row: dim exponentials, counted as 16 each (decode's 32 rows split across the threads).
  pool_.parallel_for(size_t(rows), grain_for(size_t(dim) * 16), [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = f32(x) + r * dim;
      const float* zr = f32(z) + r * dim;
      float* o = f32(out) + r * dim;
      float inv = 1.0f / std::sqrt(dot_f32(xr, xr, dim) / float(dim) + eps);
      thread_local std::vector<float> gate;  // silu(z): out may be x, so not written before x is read
      gate.assign(zr, zr + dim);
      silu_inplace(gate.data(), dim);
      for (int i = 0; i < dim; ++i) o[i] = w[i] * (xr[i] * inv) * gate[size_t(i)];
    }
  });
}

}  // namespace moelens
