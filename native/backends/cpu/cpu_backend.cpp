#include "cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "../../core/error.h"
#include "activations.h"
#include "dot.h"
#include "gemm.h"

namespace moelens {

using namespace cpu;

CpuBuffer::CpuBuffer(ElemType type, size_t count) : Buffer(type, count), data_(new uint32_t[count ? count : 1]()) {}

CpuBackend::CpuBackend(int threads, Precision precision) : pool_(threads), precision_(precision) {}

std::unique_ptr<Buffer> CpuBackend::alloc(ElemType type, size_t count) {
  if (type == ElemType::F16) fail("cpu backend: no F16 buffers (its KV cache is F32)");
  return std::make_unique<CpuBuffer>(type, count);
}

std::unique_ptr<Buffer> CpuBackend::upload(const std::vector<float>& values) {
  auto b = std::make_unique<CpuBuffer>(ElemType::F32, values.size());
  std::memcpy(b->f32(), values.data(), values.size() * 4);
  return b;
}

std::unique_ptr<Weight> CpuBackend::upload(const LinearWeight& w) { return std::make_unique<CpuWeight>(w); }

void CpuBackend::write(View dst, const void* src, size_t count) { std::memcpy(f32(dst), src, count * 4); }
void CpuBackend::read(View src, void* dst, size_t count) { std::memcpy(dst, f32(src), count * 4); }
void CpuBackend::copy(View dst, View src, size_t count) { std::memmove(f32(dst), f32(src), count * 4); }
void CpuBackend::fill(View dst, float value, size_t count) { std::fill_n(f32(dst), count, value); }

void CpuBackend::embed(const Weight& table, View ids, int n, View out) {
  const LinearWeight& w = static_cast<const CpuWeight&>(table).w;
  const int32_t* id = i32(ids);
  float* o = f32(out);
  for (int t = 0; t < n; ++t) dequantize_row(w, row_of(w, 0, id[t]), o + size_t(t) * w.cols);
}

void CpuBackend::rms_norm(View x, View weight, int rows, int dim, float eps, View out) {
  const float* w = weight ? f32(weight) : nullptr;
  float* xs = f32(x);
  float* os = f32(out);
  pool_.parallel_for(size_t(rows), grain_for(size_t(dim)), [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = xs + r * dim;
      float* o = os + r * dim;
      float ss = dot_f32(xr, xr, dim);
      float inv = 1.0f / std::sqrt(ss / float(dim) + eps);
      for (int i = 0; i < dim; ++i) o[i] = xr[i] * inv * (w ? w[i] : 1.0f);
    }
  });
}

void CpuBackend::add(View a, View b, size_t count, float s) { axpy(s, f32(b), f32(a), int64_t(count)); }

void CpuBackend::scale(View x, float s, size_t count) {
  float* p = f32(x);
  for (size_t i = 0; i < count; ++i) p[i] *= s;
}

const Int8Input& CpuBackend::quantized_for(const LinearWeight& w, const float* x, int n, QuantizedInputs* q) {
  for (size_t i = 0; i < q->used; ++i)
    if (q->entries[i]->fits(w)) return *q->entries[i];
  if (q->used == q->entries.size()) q->entries.push_back(std::make_unique<Int8Input>());
  Int8Input& in = *q->entries[q->used++];
  quantize(w, x, n, &in);
  return in;
}

void CpuBackend::linear_shared(const std::vector<LinearJob>& jobs, const float* x, int n) {
  thread_local QuantizedInputs quantized;
  quantized.used = 0;
  // Reused across calls, so that large packs keep their pages. Per thread: sessions may run forward on
  // different threads at once (the pool serialises only the parallel loops).
  thread_local std::vector<PackedTokens> packs;
  size_t packs_used = 0;
  std::vector<PreparedInput> tokens_in;  // each token's activations for dot_row_tokens, shared likewise
  const LinearWeight* tokens_layout = nullptr;
  for (const LinearJob& j : jobs) {
    const LinearWeight& w = *j.w;
    if (int8(w, n)) {
      linear_int8(w, j.expert, quantized_for(w, x, n, &quantized), j.y);
    } else if (n == 1) {
      PreparedInput in;
      prepare_input(w, x, &in);
      pool_.parallel_for(size_t(w.rows), grain_for(size_t(w.cols)), [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) j.y[r] = dot_row(w, row_of(w, j.expert, int64_t(r)), in);
      });
    } else if (n <= kRowTokens && has_token_row_kernel(w)) {  // a few tokens: rows unpacked once, no tiles
      if (!tokens_layout || tokens_layout->cols != w.cols || tokens_layout->group_size != w.group_size) {
        tokens_in.resize(size_t(n));
        for (int t = 0; t < n; ++t) prepare_input(w, x + size_t(t) * size_t(w.cols), &tokens_in[size_t(t)]);
        tokens_layout = &w;
      }
      pool_.parallel_for(size_t(w.rows), grain_for(size_t(w.cols) * n), [&](size_t r0, size_t r1) {
        float out[kRowTokens];
        for (size_t r = r0; r < r1; ++r) {
          dot_row_tokens(w, row_of(w, j.expert, int64_t(r)), tokens_in.data(), n, out);
          for (int t = 0; t < n; ++t) j.y[size_t(t) * size_t(w.rows) + r] = out[t];
        }
      });
    } else {
      auto p = std::find_if(packs.begin(), packs.begin() + ptrdiff_t(packs_used), [&](const PackedTokens& pt) { return pt.fits(w); });
      if (p == packs.begin() + ptrdiff_t(packs_used)) {
        if (packs_used == packs.size()) packs.emplace_back();
        p = packs.begin() + ptrdiff_t(packs_used++);
        pack_tokens(x, n, w.cols, uses_reordered_columns(w), &*p);
      }
      linear_packed(w, j.expert, *p, j.y);
    }
  }
}

// Prefill: dequantise a tile of weight rows once and reuse it for every token, in the column order the
// dequantiser produces fastest (the activations were packed in that order).
void CpuBackend::linear_packed(const LinearWeight& w, int64_t expert, const PackedTokens& xp, float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  const int64_t tiles = (rows + kGemmRows - 1) / kGemmRows;
  pool_.parallel_for(size_t(tiles), grain_for(size_t(kGemmRows) * cols * xp.n), [&](size_t b0, size_t b1) {
    // Per thread and reused: a tile is written before it is read, so it needs no zeroing (in a last, short
    // tile the spare rows hold stale values, computed and then dropped).
    thread_local std::vector<float> tile;
    tile.resize(std::max(tile.size(), size_t(kGemmRows) * cols));
    for (size_t b = b0; b < b1; ++b) {
      const int64_t r0 = int64_t(b) * kGemmRows;
      const int nr = int(std::min<int64_t>(kGemmRows, rows - r0));
      for (int r = 0; r < nr; ++r) dequantize_row_reordered(w, row_of(w, expert, r0 + r), tile.data() + r * cols);
      gemm_tile(tile.data(), nr, xp, y, rows, r0);
    }
  });
}

void CpuBackend::quantize(const LinearWeight& w, const float* x, int n, Int8Input* in) {
  in->init(w, n, planes());
  pool_.parallel_for(size_t(n), grain_for(size_t(w.cols) * 4), [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) in->quantize_row(x + t * size_t(w.cols), int(t));
  });
  in->pack();
}

// The int8-activation matmul (int8.h): rows in parallel for one token, tiles of 8 rows x all tokens
// otherwise (each tile's packed rows, a few KiB, stay in L1 while the tokens stream past).
void CpuBackend::linear_int8(const LinearWeight& w, int64_t expert, const Int8Input& in, float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  if (in.n == 1) {
    pool_.parallel_for(size_t(rows), grain_for(size_t(cols)), [&](size_t r0, size_t r1) {
      dot_rows_int8(w, expert, int64_t(r0), int64_t(r1), in, y + r0);
    });
    return;
  }
  constexpr int kTile = 8;
  pool_.parallel_for(size_t((rows + kTile - 1) / kTile), grain_for(size_t(kTile) * cols * in.n), [&](size_t b0, size_t b1) {
    for (size_t b = b0; b < b1; ++b) {
      const int64_t r0 = int64_t(b) * kTile;
      gemm_int8(w, expert, r0, int(std::min<int64_t>(kTile, rows - r0)), in, y, rows);
    }
  });
}

void CpuBackend::matmul(const Weight& weight, View x, int n, View out) {
  linear(static_cast<const CpuWeight&>(weight).w, 0, f32(x), n, f32(out));
}

void CpuBackend::matmul_group(const std::vector<MatmulJob>& jobs, View x, int n) {
  if (n != 1) {
    std::vector<LinearJob> linear_jobs;
    for (const MatmulJob& j : jobs) linear_jobs.push_back({&static_cast<const CpuWeight*>(j.weight)->w, 0, f32(j.out)});
    return linear_shared(linear_jobs, f32(x), n);
  }
  // Decode: one parallel loop over the rows of every matrix.
  thread_local QuantizedInputs quantized;
  quantized.used = 0;
  std::vector<PreparedInput> in(jobs.size());
  std::vector<const Int8Input*> in8(jobs.size());
  std::vector<size_t> first_row(jobs.size() + 1, 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LinearWeight& w = static_cast<const CpuWeight*>(jobs[i].weight)->w;
    in8[i] = int8(w, n) ? &quantized_for(w, f32(x), n, &quantized) : nullptr;
    if (!in8[i]) prepare_input(w, f32(x), &in[i]);
    first_row[i + 1] = first_row[i] + size_t(w.rows);
  }
  const size_t cols = size_t(static_cast<const CpuWeight*>(jobs[0].weight)->w.cols);
  pool_.parallel_for(first_row.back(), grain_for(cols), [&](size_t r0, size_t r1) {
    // The jobs' row ranges that [r0, r1) covers.
    for (size_t j = size_t(std::upper_bound(first_row.begin(), first_row.end(), r0) - first_row.begin()) - 1;
         j < jobs.size() && first_row[j] < r1; ++j) {
      const LinearWeight& w = static_cast<const CpuWeight*>(jobs[j].weight)->w;
      const int64_t a = int64_t(std::max(r0, first_row[j]) - first_row[j]), b = int64_t(std::min(r1, first_row[j + 1]) - first_row[j]);
      float* y = f32(jobs[j].out);
      if (in8[j]) dot_rows_int8(w, 0, a, b, *in8[j], y + a);
      else
        for (int64_t r = a; r < b; ++r) y[r] = dot_row(w, row_of(w, 0, r), in[j]);
    }
  });
}

void CpuBackend::argmax(View logits, int rows, int vocab, View ids) {
  for (int r = 0; r < rows; ++r) {
    const float* v = f32(logits) + size_t(r) * vocab;
    int best = 0;
    for (int i = 1; i < vocab; ++i)
      if (v[i] > v[best] || (std::isnan(v[best]) && !std::isnan(v[i]))) best = i;
    i32(ids)[r] = best;
  }
}

void CpuBackend::route(View logits, View bias, int n, int experts, int k, bool renormalize, View ids, View weights,
                       View probs) {
  std::vector<float> p(static_cast<size_t>(experts));
  std::vector<int> order(static_cast<size_t>(experts));
  for (int t = 0; t < n; ++t) {
    const float* l = f32(logits) + size_t(t) * experts;
    const float* b = bias ? f32(bias) + size_t(t) * experts : nullptr;
    auto forced = [&](int e) { return b && b[e] == INFINITY; };
    float mx = -INFINITY;
    for (int e = 0; e < experts; ++e) {
      p[e] = l[e] + (b && !forced(e) ? b[e] : 0.f);
      mx = std::max(mx, p[e]);
    }
    float sum = 0.f;
    for (int e = 0; e < experts; ++e) sum += (p[e] = p[e] == -INFINITY ? 0.f : std::exp(p[e] - mx));
    for (int e = 0; e < experts; ++e) p[e] = sum > 0 ? p[e] / sum : 0.f;
    if (probs) std::copy(p.begin(), p.end(), f32(probs) + size_t(t) * experts);
    // top-k: forced experts first, then by descending probability; ties go to the lower expert id
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int c) {
      if (forced(a) != forced(c)) return forced(a);
      return p[a] > p[c] || (p[a] == p[c] && a < c);
    });
    float total = 0.f;
    for (int s = 0; s < k; ++s) total += p[order[s]];
    for (int s = 0; s < k; ++s) {
      i32(ids)[size_t(t) * k + s] = order[s];
      f32(weights)[size_t(t) * k + s] = renormalize && total > 0 ? p[order[s]] / total : p[order[s]];
    }
  }
}

void CpuBackend::moe_experts_one_token(const LinearWeight& G, const LinearWeight& U, const LinearWeight& D,
                                       const float* x, const int32_t* ids, const float* weights, int k,
                                       const SharedExpert& shared, float* out) {
  // The k routed experts and the shared one as slots of the same two loops: one parallel loop over
  // every slot's gate and up rows, one over the output rows summing every slot's down rows. The shared
  // expert is the last slot, so the sum keeps the order of adding it after the routed ones.
  struct Slot {
    const LinearWeight *g, *u, *d;
    int64_t expert;
    float weight;
  };
  std::vector<Slot> slots;
  for (int s = 0; s < k; ++s) slots.push_back({&G, &U, &D, ids[s], weights[s]});
  if (shared.gate)
    slots.push_back({&static_cast<const CpuWeight&>(*shared.gate).w, &static_cast<const CpuWeight&>(*shared.up).w,
                     &static_cast<const CpuWeight&>(*shared.down).w, 0, shared.scale * sigmoid(f32(shared.gate_logit)[0])});
  const size_t S = slots.size();
  const int64_t H = D.rows;
  // Row offsets of each slot's gate (and up) rows in g and u; intermediate sizes may differ per slot.
  std::vector<size_t> first(S + 1, 0);
  for (size_t s = 0; s < S; ++s) first[s + 1] = first[s] + size_t(slots[s].g->rows);
  const size_t rows = first[S];
  // x prepared once per layout: quantised (int8 kernels) or as fp32 group sums.
  thread_local QuantizedInputs quantized;
  quantized.used = 0;
  std::vector<std::pair<const LinearWeight*, std::unique_ptr<PreparedInput>>> prepared;
  auto prepared_for = [&](const LinearWeight& w) -> const PreparedInput& {
    for (const auto& [v, p] : prepared)
      if (v->quantized() == w.quantized() && v->group_size == w.group_size && uses_reordered_columns(*v) == uses_reordered_columns(w))
        return *p;
    prepared.emplace_back(&w, std::make_unique<PreparedInput>());
    prepare_input(w, x, prepared.back().second.get());
    return *prepared.back().second;
  };
  struct SlotInput {
    const Int8Input *g8 = nullptr, *u8 = nullptr;
    const PreparedInput *gp = nullptr, *up = nullptr;
  };
  std::vector<SlotInput> in(S);
  for (size_t s = 0; s < S; ++s) {
    const LinearWeight &g = *slots[s].g, &u = *slots[s].u;
    if (int8(g, 1)) in[s].g8 = &quantized_for(g, x, 1, &quantized);
    else in[s].gp = &prepared_for(g);
    if (int8(u, 1)) in[s].u8 = &quantized_for(u, x, 1, &quantized);
    else in[s].up = &prepared_for(u);
  }
  // The slots' gate and up outputs, kept per calling thread as the quantised inputs are. The loops'
  // workers name them through these references: inside the lambdas, the thread_locals themselves would
  // be the worker's own.
  thread_local std::vector<float> g_kept, u_kept;
  std::vector<float>& g = g_kept;
  std::vector<float>& u = u_kept;
  g.resize(rows);
  u.resize(rows);
  // gate and up rows of every slot: h[s] = silu(gate_s · x) * (up_s · x). Index i < rows is a gate row,
  // else an up row; a chunk is cut where the slot or the matrix changes, so each piece is one expert's
  // contiguous rows.
  pool_.parallel_for(2 * rows, grain_for(size_t(H)), [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1;) {
      const bool is_up = i >= rows;
      const size_t row = is_up ? i - rows : i;
      const size_t s = size_t(std::upper_bound(first.begin(), first.end(), row) - first.begin()) - 1;
      const int64_t r0 = int64_t(row - first[s]), r1 = std::min<int64_t>(int64_t(first[s + 1] - first[s]), r0 + int64_t(i1 - i));
      const LinearWeight& w = is_up ? *slots[s].u : *slots[s].g;
      const Int8Input* q = is_up ? in[s].u8 : in[s].g8;
      float* y = (is_up ? u : g).data() + first[s];
      if (q) dot_rows_int8(w, slots[s].expert, r0, r1, *q, y + r0);
      else
        for (int64_t r = r0; r < r1; ++r) y[r] = dot_row(w, row_of(w, slots[s].expert, r), is_up ? *in[s].up : *in[s].gp);
      i += size_t(r1 - r0);
    }
  });
  // Each slot's down input, the slots in parallel (their exponentials).
  std::vector<PreparedInput> hd(S);
  thread_local std::vector<Int8Input> hd8_kept;
  std::vector<Int8Input>& hd8 = hd8_kept;
  hd8.resize(S);
  pool_.parallel_for(S, grain_for(size_t(first[1]) * 16), [&](size_t s0, size_t s1) {
    for (size_t s = s0; s < s1; ++s) {
      silu_inplace(&g[first[s]], int64_t(first[s + 1] - first[s]));
      for (size_t i = first[s]; i < first[s + 1]; ++i) g[i] *= u[i];
      if (int8(*slots[s].d, 1)) quantize_input(*slots[s].d, &g[first[s]], 1, &hd8[s], planes());
      else prepare_input(*slots[s].d, &g[first[s]], &hd[s]);
    }
  });
  // down rows: out[r] = Σ_s weight_s · down_s[r] · h[s]
  const bool routed8 = int8(D, 1);
  pool_.parallel_for(size_t(H), grain_for(size_t(first[1]) * S), [&](size_t r0, size_t r1) {
    thread_local std::vector<float> rows_out;
    rows_out.resize(r1 - r0);
    size_t s = 0;
    if (routed8) {  // each slot's rows of the range, then their weighted sum in slot order
      std::fill(out + r0, out + r1, 0.f);
    } else {  // the routed slots in one weighted dot product per row
      std::vector<Row> rows_of_slots(static_cast<size_t>(k));
      for (size_t r = r0; r < r1; ++r) {
        for (int j = 0; j < k; ++j) rows_of_slots[size_t(j)] = row_of(D, ids[j], int64_t(r));
        out[r] = dot_rows_weighted(D, rows_of_slots.data(), hd.data(), weights, k);
      }
      s = size_t(k);
    }
    for (; s < S; ++s) {
      const LinearWeight& d = *slots[s].d;
      if (int8(d, 1)) dot_rows_int8(d, slots[s].expert, int64_t(r0), int64_t(r1), hd8[s], rows_out.data());
      else
        for (size_t r = r0; r < r1; ++r) rows_out[r - r0] = dot_row(d, row_of(d, slots[s].expert, int64_t(r)), hd[s]);
      for (size_t r = r0; r < r1; ++r) out[r] += slots[s].weight * rows_out[r - r0];
    }
  });
}

void CpuBackend::add_shared_expert(const SharedExpert& sh, const float* x, int n, float* out) {
  const LinearWeight& G = static_cast<const CpuWeight&>(*sh.gate).w;
  const LinearWeight& U = static_cast<const CpuWeight&>(*sh.up).w;
  const LinearWeight& D = static_cast<const CpuWeight&>(*sh.down).w;
  const int64_t H = D.rows, I = G.rows;
  thread_local std::vector<float> shared_g, shared_u, shared_y;  // per thread, as in linear_shared
  shared_g.resize(size_t(n) * I);
  shared_u.resize(size_t(n) * I);
  shared_y.resize(size_t(n) * H);
  linear_shared({{&G, 0, shared_g.data()}, {&U, 0, shared_u.data()}}, x, n);
  silu_inplace(shared_g.data(), int64_t(shared_g.size()));
  for (size_t i = 0; i < shared_g.size(); ++i) shared_g[i] *= shared_u[i];
  linear(D, 0, shared_g.data(), n, shared_y.data());
  for (int t = 0; t < n; ++t) axpy(sh.scale * sigmoid(f32(sh.gate_logit)[t]), &shared_y[size_t(t) * H], out + size_t(t) * H, H);
}

void CpuBackend::moe_experts(const Weight& gate_w, const Weight& up_w, const Weight& down_w, View x, View ids,
                             View weights, int n, int k, View out, const SharedExpert& shared) {
  const LinearWeight& G = static_cast<const CpuWeight&>(gate_w).w;
  const LinearWeight& U = static_cast<const CpuWeight&>(up_w).w;
  const LinearWeight& D = static_cast<const CpuWeight&>(down_w).w;
  const float* xs = f32(x);
  float* o = f32(out);
  if (n == 1) return moe_experts_one_token(G, U, D, xs, i32(ids), f32(weights), k, shared, o);
  moe_experts_grouped(G, U, D, xs, i32(ids), f32(weights), n, k, o);
  if (shared.gate) add_shared_expert(shared, xs, n, o);
}

void CpuBackend::moe_experts_grouped(const LinearWeight& G, const LinearWeight& U, const LinearWeight& D, const float* xs,
                                     const int32_t* ids, const float* weights, int n, int k, float* o) {
  const int64_t H = G.cols, I = G.rows;
  // Group the (token, slot) pairs by expert so that each expert's weights are read once per call.
  std::vector<std::vector<int>> by_expert(size_t(G.experts));
  for (int p = 0; p < n * k; ++p) by_expert[size_t(ids[p])].push_back(p);
  std::vector<int> order;
  for (size_t e = 0; e < by_expert.size(); ++e)
    if (!by_expert[e].empty()) order.push_back(int(e));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return by_expert[size_t(a)].size() > by_expert[size_t(b)].size(); });
  // One expert per task, the busiest first: an expert's matmuls are too small to split across threads
  // without the hand-offs and the wait for the slowest thread costing more than they save. Each pair's
  // weighted output goes to its own row, and the rows are summed in slot order below, so the result does
  // not depend on which thread ran which expert.
  thread_local std::vector<float> pair_buffer;  // per calling thread, as in linear_shared
  pair_buffer.resize(size_t(n) * k * H);
  float* pair_out = pair_buffer.data();  // [n·k, H]; the tasks' threads see their own thread_locals
  pool_.parallel_tasks(order.size(), [&](size_t task) {
    const int e = order[task];
    const std::vector<int>& pairs = by_expert[size_t(e)];
    const int m = int(pairs.size());
    thread_local std::vector<float> xin, g, u, y;
    xin.resize(size_t(m) * H);
    for (int j = 0; j < m; ++j) std::memcpy(&xin[size_t(j) * H], xs + size_t(pairs[j] / k) * H, size_t(H) * 4);
    g.resize(size_t(m) * I);
    u.resize(size_t(m) * I);
    y.resize(size_t(m) * H);
    linear_shared({{&G, int64_t(e), g.data()}, {&U, int64_t(e), u.data()}}, xin.data(), m);
    silu_inplace(g.data(), int64_t(g.size()));
    for (size_t i = 0; i < g.size(); ++i) g[i] *= u[i];
    linear(D, int64_t(e), g.data(), m, y.data());
    for (int j = 0; j < m; ++j) {
      float* out = pair_out + size_t(pairs[j]) * H;
      const float w = weights[pairs[j]];
      for (int64_t i = 0; i < H; ++i) out[i] = w * y[size_t(j) * H + i];
    }
  });
  pool_.parallel_for(size_t(n), 1, [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) {
      float* out = o + t * H;
      std::memcpy(out, pair_out + t * k * H, size_t(H) * 4);
      for (int s = 1; s < k; ++s) axpy(1.f, pair_out + (t * k + s) * H, out, H);
    }
  });
}

}  // namespace moelens
