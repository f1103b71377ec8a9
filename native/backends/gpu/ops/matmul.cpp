// Matrix products with stored weights: matmul and fused groups of matmuls of one input, as GEMVs
// (decode) or, for chunks that tiled(n) takes, as tiled GEMMs on the matrix units.
#include <algorithm>
#include <cmath>

#include "../call.h"

namespace moelens::gpu {

static_assert(GEMM_THREADS == 128 && GEMM_TILE_TOKENS == 64 && GEMM_TILE_ROWS == 64,
              "gemm: a threadgroup is 4 simdgroups, each a 32x32 quarter of the tile");
static_assert(GEMM_WIDE_THREADS == 256 && GEMM_WIDE_TILE == 128,
              "gemm_wide: a threadgroup is 8 simdgroups, each 64 tokens x 32 rows of the tile");
static_assert((GEMM_TILE_ROWS * GEMM_K / 8) % GEMM_THREADS == 0 && (GEMM_WIDE_TILE * GEMM_WIDE_K / 8) % GEMM_WIDE_THREADS == 0 &&
                  GEMM_WIDE_TILE * GEMM_WIDE_K / GEMM_WIDE_THREADS <= GEMM_TILE_ROWS * GEMM_K / GEMM_THREADS,
              "gemm, gemm_wide: the tile loaders give each thread whole runs of 8 columns, at most TILE_RUNS_PER_THREAD");
static_assert(GEMM_TILE_ROWS * 2 == GEMM_THREADS && GEMM_WIDE_TILE * 2 == GEMM_WIDE_THREADS && GEMM_K == 64 &&
                  GEMM_WIDE_K == 32,
              "fetch_weights: two threads to a weight row, each half the K-step (32 or 16 columns)");
static_assert(GEMM_K % GEMM_WIDE_K == 0, "half_rows: rows padded to GEMM_K columns serve gemm_wide's K-steps too");
static_assert((GEMM_K + GEMM_PAD) % 16 == 8 && (GEMM_WIDE_K + GEMM_PAD) % 16 == 8,
              "tile_products: tile rows 16-byte aligned (simdgroup_load4) and an odd number of 16-byte units apart "
              "(the 8 rows of an 8x8 load on distinct banks)");
static_assert(8 * 8 * (32 + GEMM_OUT_PAD) * sizeof(float) <= GEMM_WIDE_TILE * (GEMM_WIDE_K + GEMM_PAD) * 2,
              "gemm_wide: the epilogue's slabs fit in the activation tile");
// gemm, gemm_wide and gemm_q4 take the same arguments.
static_assert(k::gemm::w0 == k::gemm_wide::w0 && k::gemm::s3 == k::gemm_wide::s3 && k::gemm::out3 == k::gemm_wide::out3 &&
                  k::gemm::x == k::gemm_wide::x && k::gemm::p == k::gemm_wide::p && k::gemm::w0 == k::gemm_q4::w0 &&
                  k::gemm::s3 == k::gemm_q4::s3 && k::gemm::out3 == k::gemm_q4::out3 && k::gemm::x == k::gemm_q4::x &&
                  k::gemm::p == k::gemm_q4::p,
              "gemm, gemm_wide, gemm_q4: the same buffer indices");
static_assert(Q4_TILE_ROWS == 4 * 32 && 4 * 8 * (32 + GEMM_OUT_PAD) <= 2 * Q4_SCALE_GROUPS * Q4_TILE_ROWS,
              "gemm_q4: 4 simdgroups of 32 rows, their slabs in the staged scales' memory");
static_assert(Q4_SCALE_GROUPS % Q4_SCALE_RUN == 0 && Q4_TILE_ROWS * Q4_SCALE_GROUPS % (Q4_SCALE_RUN * GEMM_THREADS) == 0 &&
                  Q4_GATE_UP_TILE_ROWS * Q4_SCALE_GROUPS % (Q4_SCALE_RUN * GEMM_THREADS) == 0,
              "stage_q4_scales: whole runs of scales per thread, for the 4-bit kernels' tiles");

namespace {

// A gemv or gemm kernel's binding indices of job j's weight, scales, biases and output.
struct JobSlots {
  int w[GEMV_MAX_JOBS], s[GEMV_MAX_JOBS], b[GEMV_MAX_JOBS], out[GEMV_MAX_JOBS];
};

constexpr JobSlots kGemvSlots{{k::gemv::w0, k::gemv::w1, k::gemv::w2, k::gemv::w3},
                              {k::gemv::s0, k::gemv::s1, k::gemv::s2, k::gemv::s3},
                              {k::gemv::b0, k::gemv::b1, k::gemv::b2, k::gemv::b3},
                              {k::gemv::out0, k::gemv::out1, k::gemv::out2, k::gemv::out3}};
constexpr JobSlots kGemvInt16Slots{{k::gemv_int16::w0, k::gemv_int16::w1, k::gemv_int16::w2, k::gemv_int16::w3},
                                   {k::gemv_int16::s0, k::gemv_int16::s1, k::gemv_int16::s2, k::gemv_int16::s3},
                                   {k::gemv_int16::b0, k::gemv_int16::b1, k::gemv_int16::b2, k::gemv_int16::b3},
                                   {k::gemv_int16::out0, k::gemv_int16::out1, k::gemv_int16::out2, k::gemv_int16::out3}};
constexpr JobSlots kGemmSlots{{k::gemm::w0, k::gemm::w1, k::gemm::w2, k::gemm::w3},
                              {k::gemm::s0, k::gemm::s1, k::gemm::s2, k::gemm::s3},
                              {k::gemm::b0, k::gemm::b1, k::gemm::b2, k::gemm::b3},
                              {k::gemm::out0, k::gemm::out1, k::gemm::out2, k::gemm::out3}};

// Binds the jobs to their slots (unused slots too: bound, never read), describes them and their n
// tokens in p (GemvParams or GemmParams) and numbers their blocks of `block_rows` rows consecutively:
// job j's from first[j], `total` in all.
template <class Launch, class Params>
void bind_jobs(Launch& call, const JobSlots& at, const Backend::MatmulJob* jobs, size_t count, int n, Params& p,
               uint* first, uint& total, uint block_rows) {
  p.jobs = u32(count, "jobs");
  p.n = u32(size_t(n), "tokens");
  for (size_t j = 0; j < GEMV_MAX_JOBS; ++j) {
    if (j >= count) {
      call.buf(at.w[j], nullptr).buf(at.s[j], nullptr).buf(at.b[j], nullptr).buf(at.out[j], nullptr);
      continue;
    }
    const auto& w = static_cast<const GpuWeight&>(*jobs[j].weight);
    if (w.experts) fail("gpu backend: matmul of an expert stack");
    if (j > 0 && w.desc.cols != p.cols) fail("gpu backend: matmul_group of matrices with different input sizes");
    p.w[j] = w.desc;
    p.cols = w.desc.cols;
    first[j] = total;
    total += ceil_div(w.desc.rows, block_rows);
    call.buf(at.w[j], w.data.get()).buf(at.s[j], w.scales.get()).buf(at.b[j], w.biases.get()).buf(at.out[j], jobs[j].out);
  }
}

}  // namespace

void GpuBackend::gemv_jobs(const MatmulJob* jobs, size_t count, View x, int n) {
  shader::GemvParams p{};
  Call call(*this, k::gemv::id);
  bind_jobs(call, kGemvSlots, jobs, count, n, p, p.first_block, p.total_blocks, GEMV_ROWS);
  p.x_vec4 = x.offset % 4 == 0 && p.cols % 4 == 0 ? 1u : 0u;
  size_t min_row_words = SIZE_MAX;
  for (size_t j = 0; j < count; ++j) min_row_words = std::min<size_t>(min_row_words, p.w[j].row_bytes / 4);
  p.split = split_k(p.total_blocks, p.n, min_row_words, GEMV_UNROLL);
  call.buf(k::gemv::x, x).params(k::gemv::p, p).grid(ceil_div(p.total_blocks, GEMV_SIMDGROUPS / p.split), p.n)
      .threads(GEMV_THREADS).run();
}

bool GpuBackend::writes_int16_form(size_t count, int dim, View& xq, View& de) {
  int16_form_.valid = false;
  if (precision_ != Precision::F16 || prompt_ || dim % int(INT16_BLOCK) != 0) return false;
  scratch(int16_form_buf_, int16_floats(count));
  xq = View(int16_form_buf_.get()), de = int16_scales(int16_form_buf_.get(), count);
  return true;
}

View GpuBackend::int16_rows(View x, int n, uint32_t cols, View& de) {
  const size_t count = size_t(n) * cols;
  if (int16_form_.valid && int16_form_.out.buf == x.buf && int16_form_.out.offset == x.offset && int16_form_.count == count) {
    de = int16_scales(int16_form_buf_.get(), count);
    return View(int16_form_buf_.get());
  }
  scratch(int16_x_, int16_floats(count));
  de = int16_scales(int16_x_.get(), count);
  namespace q = k::quantize_int16;
  const shader::QuantizeParams p{u32(size_t(n), "tokens"), cols};
  Call(*this, q::id).buf(q::x, x).buf(q::xq, View(int16_x_.get())).buf(q::de, de).params(q::p, p)
      .grid(ceil_div(cols / INT16_BLOCK, QUANTIZE_SIMDGROUPS), p.n).threads(QUANTIZE_THREADS).run();
  return View(int16_x_.get());
}

void GpuBackend::gemv_int16_jobs(const MatmulJob* jobs, size_t count, View x, int n) {
  const uint32_t cols = static_cast<const GpuWeight&>(*jobs[0].weight).desc.cols;
  View de;
  const View xq = int16_rows(x, n, cols, de);
  for (size_t i = 0; i < count; i += GEMV_MAX_JOBS) {
    shader::GemvParams p{};
    namespace g = k::gemv_int16;
    Call call(*this, g::id);
    const size_t batch = std::min<size_t>(GEMV_MAX_JOBS, count - i);
    bind_jobs(call, kGemvInt16Slots, jobs + i, batch, n, p, p.first_block, p.total_blocks, GEMV_ROWS);
    // A lane takes a block (4 words) per step where the fp32 GEMV takes a word.
    p.split = split_k(p.total_blocks, p.n, cols / INT16_BLOCK, GEMV_UNROLL);
    call.buf(g::xq, xq).buf(g::de, de).params(g::p, p).grid(ceil_div(p.total_blocks, GEMV_SIMDGROUPS / p.split), p.n)
        .threads(GEMV_THREADS).run();
  }
}

View GpuBackend::half_rows(View x, int n, uint32_t cols, bool fragment_order) {
  shader::HalfRowsParams p{u32(size_t(n), "tokens"), cols, fragment_order ? 1u : 0u};
  const size_t halfs = size_t(n) * HALF_ROW_LD(cols);
  scratch(half_x_, halfs / 2);  // HALF_ROW_LD is even
  namespace h = k::half_rows;
  Call(*this, h::id).buf(h::x, x).buf(h::xh, half_x_.get()).params(h::p, p).grid(ceil_div(halfs / 8, HALF_ROWS_THREADS))
      .threads(HALF_ROWS_THREADS).run();
  return View(half_x_.get());
}

// Whether every job's weights can be read straight into the matrix units' fragments (gemm_q4, measured
// faster than gemm_wide at 2,048 and 4,096 tokens too): their input is then rounded in fragment order.
static bool all_q4_tiles(const Backend::MatmulJob* jobs, size_t count) {
  bool q4 = true;
  for (size_t j = 0; j < count; ++j) q4 = q4 && q4_tiles_take(static_cast<const GpuWeight&>(*jobs[j].weight));
  return q4;
}

void GpuBackend::gemm_jobs(const MatmulJob* jobs, size_t count, View xh, int n, bool q4) {
  shader::GemmParams p{};
  // Launches that are not all 4-bit fragments: long chunks on the larger tiles.
  const bool wide = !q4 && size_t(n) >= GEMM_WIDE_MIN_TOKENS;
  const uint32_t tile_tokens = wide ? GEMM_WIDE_TILE : GEMM_TILE_TOKENS;
  const uint32_t tile_rows = wide ? GEMM_WIDE_TILE : q4 ? Q4_TILE_ROWS : GEMM_TILE_ROWS;
  // A 4-bit launch of too few threadgroups to fill the GPU (an output projection of a short chunk) takes
  // the columns in parts on gemm_q4_parts, doubling them while the launch stays within
  // Q4_PARTS_TARGET_THREADGROUPS and every part has a staging of scales; gemm_parts_sum adds them.
  const uint32_t cols = static_cast<const GpuWeight&>(*jobs[0].weight).desc.cols, token_tiles = ceil_div(uint32_t(n), tile_tokens);
  const uint32_t stagings = ceil_div(cols, Q4_SCALE_GROUPS * GEMM_K);
  uint32_t row_tiles = 0, parts = 1;
  for (size_t j = 0; j < count; ++j) row_tiles += ceil_div(static_cast<const GpuWeight&>(*jobs[j].weight).desc.rows, tile_rows);
  while (q4 && size_t(row_tiles) * token_tiles * parts * 2 <= Q4_PARTS_TARGET_THREADGROUPS && parts * 2 <= stagings) parts *= 2;
  Call call(*this, parts > 1 ? k::gemm_q4_parts::id : q4 ? k::gemm_q4::id : wide ? k::gemm_wide::id : k::gemm::id);
  bind_jobs(call, kGemmSlots, jobs, count, n, p, p.first_tile, p.total_tiles, tile_rows);
  p.part_cols = ceil_div(stagings, parts) * Q4_SCALE_GROUPS * GEMM_K;
  p.parts = ceil_div(cols, p.part_cols), p.tile_rows = tile_rows;
  const size_t padded = size_t(p.total_tiles) * tile_rows * p.n;
  if (parts > 1) {
    scratch(gemm_parts_, padded * p.parts);
    call.buf(k::gemm_q4_parts::partial, gemm_parts_.get());
  }
  call.buf(k::gemm::x, xh).params(k::gemm::p, p).grid(p.total_tiles, token_tiles, p.parts)
      .threads(wide ? GEMM_WIDE_THREADS : GEMM_THREADS).run();
  if (parts > 1) sum_parts(jobs, count, p, padded);
}

void GpuBackend::sum_parts(const MatmulJob* jobs, size_t count, const shader::GemmParams& p, size_t padded) {
  namespace gs = k::gemm_parts_sum;
  Call sum(*this, gs::id);
  const int sum_at[] = {gs::out0, gs::out1, gs::out2, gs::out3};
  for (size_t j = 0; j < GEMV_MAX_JOBS; ++j) sum.opt(sum_at[j], j < count ? jobs[j].out : View());
  sum.buf(gs::partial, gemm_parts_.get()).params(gs::p, p).grid(ceil_div(padded, ELEMENTWISE_THREADS))
      .threads(ELEMENTWISE_THREADS).run();
}

static_assert(GEMM_EXACT_THREADS == 128 && GEMM_EXACT_TILE == 64,
              "gemm_exact: 4 simdgroups, each 32x32 outputs of a 64x64 tile");
static_assert(GEMM_EXACT_K % 8 == 0 && (GEMM_EXACT_TILE * GEMM_EXACT_K / 8) % GEMM_EXACT_THREADS == 0,
              "gemm_exact: the tile loaders give each thread whole runs of 8 columns");

void GpuBackend::gemm_exact_jobs(const MatmulJob* jobs, size_t count, View x, int n) {
  shader::GemmParams p{};
  p.jobs = u32(count, "jobs");
  p.n = u32(size_t(n), "tokens");
  namespace g = k::gemm_exact;
  Call call(*this, g::id);
  const int w_at[] = {g::w0, g::w1, g::w2, g::w3};
  const int s_at[] = {g::s0, g::s1, g::s2, g::s3};
  const int b_at[] = {g::b0, g::b1, g::b2, g::b3};
  const int o_at[] = {g::out0, g::out1, g::out2, g::out3};
  for (size_t j = 0; j < GEMV_MAX_JOBS; ++j) {
    if (j >= count) {  // unused slots: bound, never read
      call.buf(w_at[j], nullptr).buf(s_at[j], nullptr).buf(b_at[j], nullptr).buf(o_at[j], nullptr);
      continue;
    }
    const auto& w = static_cast<const GpuWeight&>(*jobs[j].weight);
    if (w.experts) fail("gpu backend: matmul of an expert stack");
    if (j > 0 && w.desc.cols != p.cols) fail("gpu backend: matmul_group of matrices with different input sizes");
    p.w[j] = w.desc;
    p.cols = w.desc.cols;
    p.first_tile[j] = p.total_tiles;
    p.total_tiles += ceil_div(w.desc.rows, GEMM_EXACT_TILE);
    call.buf(w_at[j], w.data.get()).buf(s_at[j], w.scales.get()).buf(b_at[j], w.biases.get()).buf(o_at[j], jobs[j].out);
  }
  // A short chunk's launch is split along the columns until it has about GEMM_EXACT_TARGET_THREADGROUPS
  // threadgroups, each part at least GEMM_EXACT_MIN_PART_STEPS K-steps; gemm_parts_sum adds the parts.
  const uint32_t blocks = p.total_tiles * ceil_div(p.n, GEMM_EXACT_TILE), steps = ceil_div(p.cols, GEMM_EXACT_K);
  uint32_t parts = 1;
  while (size_t(blocks) * parts * 2 <= GEMM_EXACT_TARGET_THREADGROUPS && steps / (parts * 2) >= GEMM_EXACT_MIN_PART_STEPS)
    parts *= 2;
  p.part_cols = ceil_div(steps, parts) * GEMM_EXACT_K;
  p.parts = ceil_div(p.cols, p.part_cols);
  p.tile_rows = GEMM_EXACT_TILE;
  const size_t padded = size_t(p.total_tiles) * GEMM_EXACT_TILE * p.n;
  if (p.parts > 1) scratch(gemm_parts_, padded * p.parts);
  call.buf(g::x, x).buf(g::partial, p.parts > 1 ? gemm_parts_.get() : nullptr).params(g::p, p)
      .grid(p.total_tiles, ceil_div(p.n, GEMM_EXACT_TILE), p.parts).threads(GEMM_EXACT_THREADS).run();
  if (p.parts > 1) sum_parts(jobs, count, p, padded);
}

static_assert(GEMV_EXACT_THREADS == 32 * GEMV_EXACT_SIMDGROUPS && GEMV_EXACT_CHUNK == 64 * GEMV_EXACT_THREADS / 8 &&
                  GEMV_EXACT_ROWS == 16,
              "gemv_exact_q4: 8 threads per group of 64 columns of a chunk; two 8-row blocks per simdgroup");

void GpuBackend::gemv_exact_q4_job(const MatmulJob& job, View x, int n) {
  const auto& w = static_cast<const GpuWeight&>(*job.weight);
  shader::GemvParams p{};
  p.w[0] = w.desc;
  p.jobs = 1;
  p.n = u32(size_t(n), "tokens");
  p.cols = w.desc.cols;
  namespace g = k::gemv_exact_q4;
  Call(*this, g::id).buf(g::w, w.data.get()).buf(g::s, w.scales.get()).buf(g::b, w.biases.get()).buf(g::out, job.out)
      .buf(g::x, x).params(g::p, p).grid(ceil_div(w.desc.rows, GEMV_EXACT_ROWS * GEMV_EXACT_SIMDGROUPS), p.n)
      .threads(GEMV_EXACT_THREADS).run();
}

void GpuBackend::matmul(const Weight& w, View x, int n, View out) { matmul_group({{&w, out}}, x, n); }

void GpuBackend::matmul_group(const std::vector<MatmulJob>& jobs, View x, int n) {
  auto lock = enter();
  auto weight = [](const MatmulJob& j) -> const GpuWeight& { return static_cast<const GpuWeight&>(*j.weight); };
  // One input, so one input size: the quantised or half rows below are made once for every job.
  for (const MatmulJob& j : jobs)
    if (weight(j).desc.cols != weight(jobs[0]).desc.cols) fail("gpu backend: matmul_group of matrices with different input sizes");
  // Jobs that must be exact run at fp32 accuracy (gemm_exact for chunks that tiled(n) takes, else the
  // GEMV; at fp16 an exact 4-bit matrix, the lm_head, on the matrix units: gemv_exact_q4). At fp16, the
  // others run on the fp16 GEMMs (tiled(n)) or on the integer GEMV (shorter calls, weights that
  // int16_takes); the rest on the fp32 GEMV.
  const bool gemm_exact = tiled(n) && n > 1;
  std::vector<MatmulJob> fp32, fp16, int16;
  for (const MatmulJob& j : jobs) {
    const bool f16 = precision_ == Precision::F16, reduced = f16 && !j.exact;
    if (reduced && tiled(n)) fp16.push_back(j);
    else if (reduced && !weight(j).experts && int16_takes(weight(j))) int16.push_back(j);
    else if (f16 && j.exact && !gemm_exact && exact_q4_takes(weight(j))) gemv_exact_q4_job(j, x, n);
    else fp32.push_back(j);
  }
  if (!int16.empty()) gemv_int16_jobs(int16.data(), int16.size(), x, n);
  // The fp16 jobs read x rounded to half once: in fragment order when all of them take gemm_q4 (a group
  // that mixes formats runs every launch on gemm or gemm_wide).
  View xh;
  const bool q4 = !fp16.empty() && all_q4_tiles(fp16.data(), fp16.size());
  if (!fp16.empty()) xh = half_rows(x, n, weight(fp16[0]).desc.cols, q4);
  for (size_t i = 0; i < fp16.size(); i += GEMV_MAX_JOBS)
    gemm_jobs(fp16.data() + i, std::min<size_t>(GEMV_MAX_JOBS, fp16.size() - i), xh, n, q4);
  // Exact jobs of a single row (a prompt's last logits) on the GEMV, which reads each weight once, where
  // gemm_exact's 64-token tiles would waste 63 of every 64 products: the same fp32 accuracy either way.
  for (size_t i = 0; i < fp32.size(); i += GEMV_MAX_JOBS) {
    const size_t count = std::min<size_t>(GEMV_MAX_JOBS, fp32.size() - i);
    if (gemm_exact) gemm_exact_jobs(fp32.data() + i, count, x, n);
    else gemv_jobs(fp32.data() + i, count, x, n);
  }
}

}  // namespace moelens::gpu
