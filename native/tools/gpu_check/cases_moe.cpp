// moelens-gpu-check: routing and the routed plus shared experts.
#include "check.h"

namespace moelens::gpu_check {

void add_moe_cases(Cases& all) {
  const CaseAdder add{all};

  // ties: integer logits, so that many probabilities are equal (lower ids first); enabled: all but
  // this many experts are disabled, so that experts of probability 0 fill the top-k.
  struct RouteShape {
    int n, experts, k;
    bool renorm, bias, probs, ties = false;
    int enabled = 0;
  };
  for (RouteShape r : {RouteShape{3, 40, 6, true, false, true}, RouteShape{2, 300, 8, false, true, true},
                       RouteShape{4, 16, 4, true, true, false}, RouteShape{1, 512, 10, true, true, true},
                       RouteShape{3, 256, 8, true, false, true, true}, RouteShape{2, 100, 40, true, true, false, true},
                       RouteShape{2, 64, 9, true, true, true, false, 4}})
    add("route " + std::to_string(r.experts) + " top-" + std::to_string(r.k) + (r.bias ? " biased" : "") +
            (r.ties ? " ties" : "") + (r.enabled ? " " + std::to_string(r.enabled) + " enabled" : ""),
        [r](Ctx& c) {
      c.shape = std::to_string(r.n) + " tokens";
      std::vector<float> l = c.rng.normals(size_t(r.n) * r.experts, 2.0f);
      if (r.ties)
        for (float& v : l) v = std::round(v);
      Pair logits = c.floats(l);
      std::vector<float> bias(size_t(r.n) * r.experts, 0.0f);
      if (r.enabled)
        for (size_t i = 0; i < bias.size(); ++i) bias[i] = int(i % size_t(r.experts)) % (r.experts / r.enabled) ? -INFINITY : 0.0f;
      else if (r.bias)
        for (int t = 0; t < r.n; ++t) {
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = -INFINITY;
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = INFINITY;
          bias[size_t(t) * r.experts + size_t(c.rng.integer(0, r.experts - 1))] = 1.5f;
        }
      Pair b = c.floats(bias), ids = c.ints(std::vector<int32_t>(size_t(r.n) * r.k, -1));
      Pair w = c.zeros(size_t(r.n) * r.k), probs = c.zeros(size_t(r.n) * r.experts);
      c.cpu.route(View(logits.cpu.get()), r.bias ? View(b.cpu.get()) : View(), r.n, r.experts, r.k, r.renorm,
                  View(ids.cpu.get()), View(w.cpu.get()), r.probs ? View(probs.cpu.get()) : View());
      c.gpu.route(View(logits.gpu.get()), r.bias ? View(b.gpu.get()) : View(), r.n, r.experts, r.k, r.renorm,
                  View(ids.gpu.get()), View(w.gpu.get()), r.probs ? View(probs.gpu.get()) : View());
      c.expect_equal_ints("route ids", ids, size_t(r.n) * r.k);
      c.expect_close("route weights", w, size_t(r.n) * r.k, 1e-5f);
      if (r.probs) c.expect_close("route probs", probs, size_t(r.n) * r.experts, 1e-5f);
    });

  // Wide: long expert rows, so that moe_down splits its blocks over several simdgroups (split-K).
  // Uneven: down rows of 24 words, not a power of two (moe_down's general loop for 4-bit experts).
  // Each case runs at fp32 (the exact kernels), then at fp16, where 4-bit experts with bf16 scales take
  // their gate and up products on x's int16 blocks (one quantize_int16 here, where no norm wrote them).
  // Tolerance of those: each activation is off by at most 1/32,512 of its block's largest, which the
  // products, SwiGLU and the down projection carry to at most 1.1e-4 of the output's scale in these
  // cases (seeds 1-3, every order); 5e-4 leaves room for other seeds, and a wrong column order or block
  // scale is off by O(1) (swapping two columns of the int16 order fails every one of them).
  const float int16_tol = 5e-4f;
  for (std::string fmt : {"q4", "q8", "bf16"})
    for (int n : {1, 3})
      for (int variant : {0, 1, 2, 3})  // 0: routed only, 1: + the shared expert, 2: wide, 3: uneven, both + shared
        add("moe_experts " + fmt + " n" + std::to_string(n) + (variant ? " + shared" : "") + (variant == 2 ? " wide" : "") +
                (variant == 3 ? " uneven" : ""),
            [fmt, n, variant, int16_tol](Ctx& c) {
          const bool with_shared = variant > 0, wide = variant == 2;
          const int E = wide ? 5 : 6, H = wide ? 64 : 128, I = wide ? 1024 : variant == 3 ? 192 : 64, K = wide ? 4 : 3,
                    SI = wide ? 512 : 96;
          c.shape = std::to_string(E) + " experts " + std::to_string(H) + "x" + std::to_string(I) + " top-" + std::to_string(K) +
                    (with_shared ? ", shared expert " + std::to_string(SI) + " scaled 0.7" : "");
          HostWeight g(c.rng, fmt, I, H, E), u(c.rng, fmt, I, H, E), d(c.rng, fmt, H, I, E, fmt == "q8" ? 32 : 64);
          HostWeight sg(c.rng, fmt, SI, H), su(c.rng, fmt, SI, H), sd(c.rng, fmt, H, SI, 0, 32);
          WeightPair G = upload(c, g), U = upload(c, u), D = upload(c, d);
          WeightPair SG = upload(c, sg), SU = upload(c, su), SD = upload(c, sd);
          std::vector<int32_t> id;
          std::vector<float> wt;
          for (int t = 0; t < n; ++t)
            for (int s = 0; s < K; ++s) id.push_back((t * 2 + s * 3) % E), wt.push_back(c.rng.uniform(0.1f, 0.5f));
          Pair ids = c.ints(id), w = c.floats(wt), x = c.floats(c.rng.normals(size_t(n) * H)), out = c.zeros(size_t(n) * H);
          Pair gl = c.floats(c.rng.normals(n));
          Backend::SharedExpert shc, shg;
          if (with_shared) {
            shc = {SG.cpu.get(), SU.cpu.get(), SD.cpu.get(), View(gl.cpu.get()), 0.7f};
            shg = {SG.gpu.get(), SU.gpu.get(), SD.gpu.get(), View(gl.gpu.get()), 0.7f};
          }
          c.cpu.moe_experts(*G.cpu, *U.cpu, *D.cpu, View(x.cpu.get()), View(ids.cpu.get()), View(w.cpu.get()), n, K,
                            View(out.cpu.get()), shc);
          auto run_gpu = [&] {
            c.gpu.moe_experts(*G.gpu, *U.gpu, *D.gpu, View(x.gpu.get()), View(ids.gpu.get()), View(w.gpu.get()), n, K,
                              View(out.gpu.get()), shg);
          };
          {
            ExactGpu exact(c.gpu);
            run_gpu();
          }
          c.expect_close("moe_experts fp32", out, size_t(n) * H, 2e-5f);
          const uint64_t before = c.launches(gpu::kernels::quantize_int16::id);
          run_gpu();
          const bool int16 = fmt == "q4";
          if (c.launches(gpu::kernels::quantize_int16::id) != before + (int16 ? 1u : 0u))
            throw Failure(std::string("the fp16 call ") + (int16 ? "did not take" : "took") + " x as int16 blocks");
          c.expect_close("moe_experts fp16", out, size_t(n) * H, int16 ? int16_tol : 2e-5f);
        });

  // The counting sort by expert and the tile list on their own, against a host counting sort, exactly:
  // bucket offsets, the entries of each bucket in entry order, each entry's position, the tiles (and
  // nothing written past them). "random": k distinct experts per token, expert 1 never chosen (an empty
  // bucket); "one for all": every token also picks expert 0; "all to one": every entry is the last
  // expert's; "out of range": some ids are -1 or >= experts (in no bucket, their positions untouched).
  // Each shape runs as the four launches and as the host picks (moe_bucket_small up to
  // MOE_BUCKET_SMALL_ENTRIES entries and MOE_BUCKET_SMALL_EXPERTS experts). Sizes cross the counting
  // blocks (512 entries) raggedly, reach the single launch's limit (4,096 entries of 256 experts) and
  // pass it by one and, at 512 experts, cross the scan's rounds (4,096).
  struct BucketShape {
    int n, k, experts;
    std::string routing;
    bool shared;
    uint32_t tile_tokens;
  };
  for (BucketShape b : {BucketShape{1, 8, 256, "random", true, MOE_SHORT_TILE_TOKENS},
                        BucketShape{15, 8, 256, "random", false, GEMM_TILE_TOKENS},
                        BucketShape{16, 8, 256, "one for all", true, GEMM_TILE_TOKENS},
                        BucketShape{65, 8, 256, "random", false, MOE_SHORT_TILE_TOKENS},
                        BucketShape{200, 8, 256, "one for all", true, MOE_SHORT_TILE_TOKENS},
                        BucketShape{65, 10, 512, "random", true, GEMM_TILE_TOKENS},
                        BucketShape{460, 10, 512, "one for all", false, MOE_SHORT_TILE_TOKENS},
                        BucketShape{70, 3, 6, "out of range", true, GEMM_TILE_TOKENS},
                        BucketShape{33, 1, 40, "one for all", false, GEMM_TILE_TOKENS},
                        BucketShape{65, 4, 16, "random", true, MOE_SHORT_TILE_TOKENS},
                        BucketShape{512, 8, 256, "random", true, MOE_SHORT_TILE_TOKENS},
                        BucketShape{512, 8, 256, "random", false, GEMM_TILE_TOKENS},
                        BucketShape{512, 8, 256, "all to one", true, GEMM_TILE_TOKENS},
                        BucketShape{512, 8, 256, "out of range", false, MOE_SHORT_TILE_TOKENS},
                        BucketShape{4097, 1, 256, "random", true, MOE_SHORT_TILE_TOKENS}})
    add("moe bucket " + std::to_string(b.experts) + " top-" + std::to_string(b.k) + " n" + std::to_string(b.n) + " " +
            b.routing + (b.shared ? " + shared" : "") + " tiles of " + std::to_string(b.tile_tokens),
        [b](Ctx& c) {
      c.shape = std::to_string(b.n) + " tokens x " + std::to_string(b.k) + " of " + std::to_string(b.experts) + " experts";
      const size_t count = size_t(b.n) * size_t(b.k);
      std::vector<int32_t> id;
      for (int t = 0; t < b.n; ++t) {
        std::vector<int32_t> pool;
        for (int e = 0; e < b.experts; ++e)
          if (e != 1 && !(b.routing == "one for all" && e == 0)) pool.push_back(e);
        std::shuffle(pool.begin(), pool.end(), c.rng.gen);
        if (b.routing == "one for all") pool.insert(pool.begin() + c.rng.integer(0, b.k - 1), 0);
        for (int s = 0; s < b.k; ++s) id.push_back(b.routing == "all to one" ? b.experts - 1 : pool[size_t(s)]);
      }
      if (b.routing == "out of range")
        for (size_t i = 0; i < count; i += 7) id[i] = i % 2 ? -1 : b.experts + int(i % 5);
      // The host's counting sort and tile list.
      const int32_t untouched = 0x7fffffff;
      std::vector<int32_t> offsets(size_t(b.experts) + 1, 0), entries(count, untouched), positions(count, untouched);
      for (int32_t e : id)
        if (e >= 0 && e < b.experts) ++offsets[size_t(e) + 1];
      for (int e = 0; e < b.experts; ++e) offsets[size_t(e) + 1] += offsets[size_t(e)];
      std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
      for (size_t i = 0; i < count; ++i)
        if (id[i] >= 0 && id[i] < b.experts) positions[i] = next[size_t(id[i])]++, entries[size_t(positions[i])] = int32_t(i);
      const uint32_t T = b.tile_tokens;
      const size_t most_tiles = (count + T - 1) / T + size_t(b.experts) + (b.shared ? (size_t(b.n) + T - 1) / T : 0);
      std::vector<int32_t> tiles(1 + most_tiles, untouched);
      int32_t listed = 0;
      for (int e = 0; e < b.experts + (b.shared ? 1 : 0); ++e) {
        const uint32_t rows = e == b.experts ? uint32_t(b.n) : uint32_t(offsets[size_t(e) + 1] - offsets[size_t(e)]);
        const uint32_t tiles_of_e = (rows + T - 1) / T;
        for (uint32_t i = 0; i < tiles_of_e; ++i) {
          const bool half = i + 1 == tiles_of_e && rows - T * i <= T / 2;
          tiles[size_t(1 + listed++)] = int32_t((uint32_t(e) << 16) | i | (half ? MOE_HALF_TILE : 0u));
        }
      }
      tiles[0] = listed;
      auto expect = [&](const std::string& what, const Pair& p, const std::vector<int32_t>& want) {
        std::vector<int32_t> got(want.size());
        c.gpu.read(View(p.gpu.get()), got.data(), got.size());
        for (size_t i = 0; i < want.size(); ++i)
          if (got[i] != want[i])
            throw Failure(what + "[" + std::to_string(i) + "]: gpu " + std::to_string(got[i]) + ", expected " +
                          std::to_string(want[i]));
      };
      struct SmallEntries {  // the default limit back, however the case ends
        gpu::GpuBackend& gpu;
        SmallEntries(gpu::GpuBackend& g, uint32_t entries) : gpu(g) { gpu.set_moe_bucket_small_entries(entries); }
        ~SmallEntries() { gpu.set_moe_bucket_small_entries(MOE_BUCKET_SMALL_ENTRIES); }
      };
      const bool small = count <= MOE_BUCKET_SMALL_ENTRIES && uint32_t(b.experts) <= MOE_BUCKET_SMALL_EXPERTS;
      for (bool four : {true, false}) {
        SmallEntries limit(c.gpu, four ? 0u : MOE_BUCKET_SMALL_ENTRIES);
        const std::string how = four || !small ? "four launches: " : "moe_bucket_small: ";
        Pair ids = c.ints(id), off = c.ints(std::vector<int32_t>(offsets.size(), untouched));
        Pair ent = c.ints(std::vector<int32_t>(count, untouched)), pos = c.ints(std::vector<int32_t>(count, untouched));
        Pair til = c.ints(std::vector<int32_t>(tiles.size(), untouched));
        const uint64_t small_before = c.launches(gpu::kernels::moe_bucket_small::id);
        const uint64_t four_before = c.launches(gpu::kernels::moe_bucket_count::id);
        c.gpu.bucket_by_expert(View(ids.gpu.get()), b.n, b.k, b.experts, b.shared, b.tile_tokens, View(off.gpu.get()),
                               View(ent.gpu.get()), View(pos.gpu.get()), View(til.gpu.get()));
        const bool ran_small = c.launches(gpu::kernels::moe_bucket_small::id) == small_before + 1;
        const bool ran_four = c.launches(gpu::kernels::moe_bucket_count::id) == four_before + 1;
        if (ran_small == ran_four || ran_small != (small && !four))
          throw Failure(std::to_string(count) + " entries of " + std::to_string(b.experts) + " experts ran " +
                        (ran_small ? "moe_bucket_small" : ran_four ? "the four launches" : "no bucketing") +
                        ", expected " + (small && !four ? "moe_bucket_small" : "the four launches"));
        expect(how + "offsets", off, offsets);
        expect(how + "entries", ent, entries);
        expect(how + "positions", pos, positions);
        expect(how + "tiles", til, tiles);
      }
    });

  // The tiled MoE prefill (counting sort by expert, grouped GEMMs, combine). Tolerance as the tiled
  // matmul's (cases_matmul.cpp): fp16 operands, h rounded to half once more before the down
  // projection; measured at most 7.8e-4 of the output's scale.
  const float tiled_tol = 3e-3f;
  // routing: "mixed" ids cycle through the experts, expert 2 never chosen; "route" runs the router
  // with +inf bias on expert 0 (every token picks it) and -inf on expert 3 (no token does).
  struct TiledMoe {
    std::string fmt;
    int group;
    DType scale;
    int n;
    bool shared;
    std::string routing;
    int hidden = 64, inter = 64, shared_inter = 32;  // shared_inter not a multiple of GEMM_K: rows of sh zero-padded
    int experts = 6;  // 300: moe_tile_list's scan across several simdgroups
    int small_group = 32;  // the down projection's and the shared expert's groups (at most `group`)
  };
  for (TiledMoe m : {TiledMoe{"q4", 64, DType::BF16, 65, true, "mixed"}, TiledMoe{"q8", 32, DType::F32, 20, true, "route"},
                     TiledMoe{"bf16", 0, DType::BF16, 70, true, "route"}, TiledMoe{"f16", 0, DType::F16, 17, false, "mixed"},
                     TiledMoe{"f32", 0, DType::BF16, 16, false, "route"}, TiledMoe{"q4", 32, DType::BF16, 200, true, "route"},
                     TiledMoe{"bf16", 0, DType::BF16, 33, true, "mixed", 72, 40, 24},
                     TiledMoe{"q8", 16, DType::F16, 40, true, "route", 80, 48, 16},
                     TiledMoe{"q4", 64, DType::BF16, 200, true, "mixed", 64, 64, 32, 300},
                     // Groups of 64 throughout: the _q4_short builds (ragged row tiles of 128; a hidden
                     // size, then an intermediate size, of 9 groups: two rounds of staged scales in
                     // gate/up, then in down), then the _q4 builds (more than 32 entries per expert on
                     // average; a bucket of every token, over 4 tiles of 64).
                     TiledMoe{"q4", 64, DType::BF16, 40, true, "route", 576, 64, 64, 6, 64},
                     TiledMoe{"q4", 64, DType::BF16, 40, true, "mixed", 192, 576, 576, 6, 64},
                     TiledMoe{"q4", 64, DType::F16, 65, false, "mixed", 128, 192, 32, 6, 64},
                     TiledMoe{"q4", 64, DType::BF16, 230, true, "route", 576, 192, 64, 6, 64},
                     TiledMoe{"q4", 64, DType::F16, 150, false, "mixed", 320, 128, 32, 6, 64}})
    add("moe_experts tiled " + m.fmt + (m.group ? " g" + std::to_string(m.group) : "") + " n" + std::to_string(m.n) +
            (m.shared ? " + shared" : "") + " " + m.routing + (m.hidden != 64 ? " " + std::to_string(m.hidden) + "x" + std::to_string(m.inter) : "") +
            (m.experts != 6 ? " " + std::to_string(m.experts) + " experts" : ""),
        [m, tiled_tol](Ctx& c) {
          const int E = m.experts, H = m.hidden, I = m.inter, K = 2, SI = m.shared_inter;  // SI: a ragged row tile
          c.shape = std::to_string(E) + " experts " + std::to_string(H) + "x" + std::to_string(I) + " top-" + std::to_string(K) +
                    ", " + std::to_string(m.n) + " tokens" + (m.shared ? ", shared expert " + std::to_string(SI) : "") +
                    (m.routing == "route" ? ", one expert with every token, one with none" : ", one expert with none");
          const int group = m.group ? m.group : 64;
          HostWeight g(c.rng, m.fmt, I, H, E, group, m.scale), u(c.rng, m.fmt, I, H, E, group, m.scale);
          const int small_group = std::min(group, m.small_group);
          HostWeight d(c.rng, m.fmt, H, I, E, small_group, m.scale);
          HostWeight sg(c.rng, m.fmt, SI, H, 0, small_group, m.scale), su(c.rng, m.fmt, SI, H, 0, small_group, m.scale);
          HostWeight sd(c.rng, m.fmt, H, SI, 0, small_group, m.scale);
          WeightPair G = upload(c, g), U = upload(c, u), D = upload(c, d);
          WeightPair SG = upload(c, sg), SU = upload(c, su), SD = upload(c, sd);
          const size_t entries = size_t(m.n) * K;
          Pair ids = c.ints(std::vector<int32_t>(entries, 0)), w = c.zeros(entries);
          if (m.routing == "route") {
            std::vector<float> bias(size_t(m.n) * E, 0.0f);
            for (int t = 0; t < m.n; ++t) bias[size_t(t) * E] = INFINITY, bias[size_t(t) * E + 3] = -INFINITY;
            Pair logits = c.floats(c.rng.normals(size_t(m.n) * E)), b = c.floats(bias);
            c.cpu.route(View(logits.cpu.get()), View(b.cpu.get()), m.n, E, K, true, View(ids.cpu.get()), View(w.cpu.get()), View());
            c.gpu.route(View(logits.gpu.get()), View(b.gpu.get()), m.n, E, K, true, View(ids.gpu.get()), View(w.gpu.get()), View());
            c.expect_equal_ints("route ids", ids, entries);
          } else {
            std::vector<int32_t> id;
            std::vector<float> wt;
            for (int t = 0; t < m.n; ++t)
              for (int s = 0; s < K; ++s) {
                const int e = (t + 3 * s) % (E - 1);
                id.push_back(e >= 2 ? e + 1 : e), wt.push_back(c.rng.uniform(0.1f, 0.5f));
              }
            ids = c.ints(id), w = c.floats(wt);
          }
          Pair x = c.floats(c.rng.normals(size_t(m.n) * H)), out = c.zeros(size_t(m.n) * H);
          Pair gl = c.floats(c.rng.normals(size_t(m.n)));
          Backend::SharedExpert shc, shg;
          if (m.shared) {
            shc = {SG.cpu.get(), SU.cpu.get(), SD.cpu.get(), View(gl.cpu.get()), 0.7f};
            shg = {SG.gpu.get(), SU.gpu.get(), SD.gpu.get(), View(gl.gpu.get()), 0.7f};
          }
          // The affine build for MLX 4- and 8-bit weights (its short-tile build when the buckets average at
          // most MOE_SHORT_TILE_TOKENS rows; `_q4` and `_q4_short` for 4-bit groups of 64 throughout, rows
          // a multiple of 8), the build for every format otherwise.
          const bool affine = m.fmt == "q4" || m.fmt == "q8", short_tiles = affine && m.n * K <= int(MOE_SHORT_TILE_TOKENS) * E;
          const bool q4_tiles = m.fmt == "q4" && group == 64 && small_group == 64 && I % 8 == 0 && H % 8 == 0 &&
                                (!m.shared || SI % 8 == 0) && m.scale != DType::F32;
          const auto build = q4_tiles      ? (short_tiles ? gpu::kernels::moe_down_tiled_q4_short::id : gpu::kernels::moe_down_tiled_q4::id)
                             : short_tiles ? gpu::kernels::moe_down_tiled_affine_short::id
                             : affine    ? gpu::kernels::moe_down_tiled_affine::id
                                         : gpu::kernels::moe_down_tiled::id;
          const uint64_t before = c.launches(build);
          const uint64_t rounded_before = c.launches(gpu::kernels::half_rows::id);
          c.cpu.moe_experts(*G.cpu, *U.cpu, *D.cpu, View(x.cpu.get()), View(ids.cpu.get()), View(w.cpu.get()), m.n, K,
                            View(out.cpu.get()), shc);
          c.gpu.moe_experts(*G.gpu, *U.gpu, *D.gpu, View(x.gpu.get()), View(ids.gpu.get()), View(w.gpu.get()), m.n, K,
                            View(out.gpu.get()), shg);
          if (c.launches(build) != before + 1)
            throw Failure("a chunk of " + std::to_string(m.n) + " tokens did not run the tiled expert kernels (" +
                          (q4_tiles ? (short_tiles ? "4-bit short-tile" : "4-bit") : short_tiles ? "affine short-tile" : affine ? "affine" : "every-format") + " build)");
          if (c.launches(gpu::kernels::half_rows::id) != rounded_before + 1)
            throw Failure("the tiled expert kernels did not read x rounded to half once");
          c.expect_close("moe_experts tiled", out, size_t(m.n) * H, tiled_tol);
        });

  // Just under CHECK_TILED_FROM: the per-token kernels (x as int16 blocks, as above).
  add("moe_experts tiled threshold", [int16_tol](Ctx& c) {
    const int E = 4, H = 64, I = 64, K = 2, n = CHECK_TILED_FROM - 1;
    c.shape = std::to_string(n) + " tokens";
    HostWeight g(c.rng, "q4", I, H, E), u(c.rng, "q4", I, H, E), d(c.rng, "q4", H, I, E);
    WeightPair G = upload(c, g), U = upload(c, u), D = upload(c, d);
    std::vector<int32_t> id;
    for (int t = 0; t < n; ++t) id.push_back(t % E), id.push_back((t + 1) % E);
    Pair ids = c.ints(id), w = c.floats(c.rng.normals(size_t(n) * K)), x = c.floats(c.rng.normals(size_t(n) * H));
    Pair out = c.zeros(size_t(n) * H);
    auto tiled = [&c] {
      return c.launches(gpu::kernels::moe_down_tiled::id) + c.launches(gpu::kernels::moe_down_tiled_affine::id) +
             c.launches(gpu::kernels::moe_down_tiled_affine_short::id) + c.launches(gpu::kernels::moe_down_tiled_q4_short::id) +
             c.launches(gpu::kernels::moe_down_tiled_q4::id);
    };
    const uint64_t before = tiled();
    c.cpu.moe_experts(*G.cpu, *U.cpu, *D.cpu, View(x.cpu.get()), View(ids.cpu.get()), View(w.cpu.get()), n, K,
                      View(out.cpu.get()), {});
    c.gpu.moe_experts(*G.gpu, *U.gpu, *D.gpu, View(x.gpu.get()), View(ids.gpu.get()), View(w.gpu.get()), n, K,
                      View(out.gpu.get()), {});
    if (tiled() != before)
      throw Failure(std::to_string(n) + " tokens ran the tiled expert kernels");
    c.expect_close("moe_experts", out, size_t(n) * H, int16_tol);
  });
}

}  // namespace moelens::gpu_check
