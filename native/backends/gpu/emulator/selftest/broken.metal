// Kernels that break the rules of the portable MSL subset, one rule each: the emulator must reject or
// expose every one of them (selftest.cpp). Not part of the product.
#include <metal_stdlib>
using namespace metal;

// out[i] = tile[i - 1] without a barrier between the write and the read: right by luck when the threads
// run in forward order, NaN (the poison) in reverse order.
kernel void missing_barrier(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[i] = float(i);
  out[i] = i > 0u ? tile[i - 1u] : 0.0f;
}

// The same with the barrier: right in every order.
kernel void with_barrier(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[i] = float(i);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = i > 0u ? tile[i - 1u] : 0.0f;
}

// Simdgroup 1 overwrites a word that simdgroup 0 reads, with collectives but no barrier between the
// write and the read: simdgroup 0 reads the old word (1) when it runs ahead (forward order), the new
// one (2) when simdgroup 1 does (reverse order), as on a GPU whose simdgroups run at their own pace.
kernel void missing_barrier_across_simdgroups(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]],
                                              uint sg [[simdgroup_index_in_threadgroup]],
                                              uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float word[1];
  if (i == 0u) word[0] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float lanes = simd_sum(1.0f);
  if (sg == 1u && lane == 0u) word[0] = 2.0f;
  out[i] = simd_sum(1.0f) == lanes ? word[0] : 0.0f;
}

// Half the threadgroup returns before a barrier the other half waits at.
kernel void barrier_not_reached(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  if (i >= 32u) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = 1.0f;
}

// Two halves wait at two different barriers.
kernel void two_barriers(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  if (i < 32u) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[i] = 1.0f;
}

// A simd collective reached by half of the simdgroup (fine on Apple GPUs, not with CUDA's full mask).
kernel void divergent_simd_sum(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  float v = 1.0f;
  if (lane < 16u) v = simd_sum(v);
  out[lane] = v;
}

// A simd collective while the other lanes wait at a barrier.
kernel void simd_sum_against_barrier(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  float v = 1.0f;
  if (lane < 16u) v = simd_sum(v);
  else threadgroup_barrier(mem_flags::mem_threadgroup);
  out[lane] = v;
}

// 36,000 bytes of threadgroup memory.
kernel void too_much_threadgroup_memory(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float big[9000];
  big[i] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = big[i];
}

// simd_shuffle from a lane that does not exist.
kernel void shuffle_out_of_range(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  out[lane] = simd_shuffle(1.0f, ushort(40));
}

// The collectives themselves, for their results: sum, max, prefix sum, shuffles, broadcast.
kernel void collectives(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  const float v = float(lane);
  out[lane] = simd_sum(v);
  out[32u + lane] = simd_max(v);
  out[64u + lane] = simd_prefix_exclusive_sum(v);
  out[96u + lane] = simd_shuffle_down(v, ushort(3));
  out[128u + lane] = simd_shuffle_xor(v, ushort(5));
  out[160u + lane] = simd_broadcast(v, ushort(7));
}

// A 16-byte vector read through a pointer that is only 4-byte aligned.
kernel void misaligned_vector_load(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  const float4 v = ((device const float4*)(out + 1))[0];
  out[lane] = v.x;
}

// Simdgroup matrices, for their results: two 8x16 by 16x8 products accumulated onto 0.5, the second
// matrix loaded row-major by simdgroup 0 and transposed (from its transpose) by simdgroup 1, k-blocks
// addressed by origin; both results stored at an origin. Inputs in out[0, 256), results in out[0, 128).
kernel void simdgroup_matrices(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]],
                               uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup half a[128];   // [8][16]
  threadgroup half b[128];   // [16][8]
  threadgroup half bt[128];  // [8][16]: bt[n][k] = b[k][n]
  threadgroup float c[128];  // [16][8]
  for (uint j = i; j < 128u; j += 64u) {
    a[j] = half(out[j]);
    b[j] = half(out[128u + j]);
    bt[(j % 8u) * 16u + j / 8u] = half(out[128u + j]);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 ma;
  simdgroup_half8x8 mb;
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
  for (uint kb = 0u; kb < 2u; ++kb) {
    simdgroup_load(ma, a, 16, ulong2(kb * 8u, 0u));
    if (sg == 0u) simdgroup_load(mb, b, 8, ulong2(0u, kb * 8u));
    else simdgroup_load(mb, bt, 16, ulong2(kb * 8u, 0u), true);
    simdgroup_multiply_accumulate(acc, ma, mb, acc);
  }
  simdgroup_store(acc, c, 8, ulong2(0u, sg * 8u));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint j = i; j < 128u; j += 64u) out[j] = c[j];
}

// simdgroup_multiply_accumulate_pair, for its results: a 16x8 by 8x8 product as two 8x8 products that
// share the second matrix (loaded transposed from its transpose), accumulated onto 0.5 (rows 0-7) and
// 0.25 (rows 8-15). Simdgroup 0 loads from rows of 8 halfs, simdgroup 1 from rows of 9 (not 4-byte
// aligned). Inputs in out[0, 192): A [16][8], then B [8][8]; results in out[0, 256): simdgroup s's
// rows at 16s.
kernel void simdgroup_matrix_pair(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]],
                                  uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup half a8[128];  // [16][8]
  threadgroup half a9[144];  // [16][9]
  threadgroup half bt8[64];  // [8][8]: bt[n][k] = b[k][n]
  threadgroup half bt9[72];  // [8][9]
  threadgroup float c[256];  // [32][8]
  for (uint j = i; j < 128u; j += 64u) {
    a8[j] = half(out[j]);
    a9[(j / 8u) * 9u + j % 8u] = half(out[j]);
  }
  bt8[(i % 8u) * 8u + i / 8u] = half(out[128u + i]);
  bt9[(i % 8u) * 9u + i / 8u] = half(out[128u + i]);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 top;
  simdgroup_half8x8 bottom;
  simdgroup_half8x8 b;
  if (sg == 0u) {
    simdgroup_load(top, a8, 8);
    simdgroup_load(bottom, a8, 8, ulong2(0u, 8u));
    simdgroup_load(b, bt8, 8, ulong2(0u, 0u), true);
  } else {
    simdgroup_load(top, a9, 9);
    simdgroup_load(bottom, a9, 9, ulong2(0u, 8u));
    simdgroup_load(b, bt9, 9, ulong2(0u, 0u), true);
  }
  simdgroup_float8x8 d0 = make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
  simdgroup_float8x8 d1 = make_filled_simdgroup_matrix<float, 8, 8>(0.25f);
  simdgroup_multiply_accumulate_pair(d0, d1, top, bottom, b, d0, d1);
  simdgroup_store(d0, c, 8, ulong2(0u, sg * 16u));
  simdgroup_store(d1, c, 8, ulong2(0u, sg * 16u + 8u));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint j = i; j < 256u; j += 64u) out[j] = c[j];
}

// simdgroup_load4 and simdgroup_multiply_accumulate_16x16 (the tiled prefill GEMMs' calls), for their
// results: C = A·B + (0.5 in rows 0-7, 0.25 in rows 8-15), A [16][16] and B [16][16], as 16x16 by 16x8
// products (two column blocks of B). A and B are loaded as 16x16 matrices at column 8 of rows of 24
// halfs; simdgroup 0 loads B transposed from its transpose, simdgroup 1 as stored. Inputs in out[0,
// 512): A, then B; results in out[0, 512): simdgroup s's C at 256s.
kernel void simdgroup_matrix_16x16(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]],
                                   uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup uint4 a_words[48];   // [16][24] halfs
  threadgroup uint4 b_words[48];   // [16][24]: b[k][8 + n] = B[k][n]
  threadgroup uint4 bt_words[48];  // [16][24]: bt[n][8 + k] = B[k][n]
  threadgroup float c[512];        // [32][16]
  threadgroup half* a = (threadgroup half*)a_words;
  threadgroup half* b = (threadgroup half*)b_words;
  threadgroup half* bt = (threadgroup half*)bt_words;
  for (uint j = i; j < 256u; j += 64u) {
    const uint r = j / 16u, col = j % 16u;
    a[r * 24u + 8u + col] = half(out[j]);
    b[r * 24u + 8u + col] = half(out[256u + j]);
    bt[col * 24u + 8u + r] = half(out[256u + j]);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 a00;
  simdgroup_half8x8 a10;
  simdgroup_half8x8 a01;
  simdgroup_half8x8 a11;
  simdgroup_half8x8 q[4];  // B's quadrants: k block 0 and 1 of column block 0, then of column block 1
  simdgroup_load4(a00, a10, a01, a11, a, 24, ulong2(8u, 0u));
  if (sg == 0u) simdgroup_load4(q[0], q[1], q[2], q[3], bt, 24, ulong2(8u, 0u), true);
  else simdgroup_load4(q[0], q[1], q[2], q[3], b, 24, ulong2(8u, 0u));
  for (uint n = 0u; n < 2u; ++n) {
    simdgroup_float8x8 d0 = make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
    simdgroup_float8x8 d1 = make_filled_simdgroup_matrix<float, 8, 8>(0.25f);
    simdgroup_multiply_accumulate_16x16(d0, d1, a00, a10, a01, a11, q[2u * n], q[2u * n + 1u], d0, d1);
    simdgroup_store(d0, c, 16, ulong2(8u * n, 16u * sg));
    simdgroup_store(d1, c, 16, ulong2(8u * n, 16u * sg + 8u));
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint j = i; j < 512u; j += 64u) out[j] = c[j];
}

// simdgroup_load4 from rows that are not 16-byte aligned.
kernel void matrix_load4_misaligned(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup uint4 words[40];  // [16][20] halfs
  threadgroup half* a = (threadgroup half*)words;
  for (uint j = lane; j < 320u; j += 32u) a[j] = half(1.0f);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 m0;
  simdgroup_half8x8 m1;
  simdgroup_half8x8 m2;
  simdgroup_half8x8 m3;
  simdgroup_load4(m0, m1, m2, m3, a, 20, ulong2(4u, 0u));
  simdgroup_float8x8 c;
  simdgroup_multiply(c, m0, m3);
  simdgroup_store(c, out, 8);
}

// A simdgroup matrix load that half of the lanes skip.
kernel void matrix_load_divergent(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup half a[64];
  a[lane] = half(1.0f);
  a[lane + 32u] = half(1.0f);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 m = make_filled_simdgroup_matrix<half, 8, 8>(half(0.0f));
  if (lane < 16u) simdgroup_load(m, a, 8);
  simdgroup_float8x8 c;
  simdgroup_multiply(c, m, m);
  simdgroup_store(c, out, 8);
}

// A simdgroup matrix load whose source differs between lanes.
kernel void matrix_load_nonuniform(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup half a[128];
  for (uint j = lane; j < 128u; j += 32u) a[j] = half(1.0f);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_half8x8 m;
  simdgroup_load(m, a + lane, 8);
  simdgroup_float8x8 c;
  simdgroup_multiply(c, m, m);
  simdgroup_store(c, out, 8);
}

// Reading what other lanes of the simdgroup stored, without (or with) a barrier in between.
kernel void matrix_store_then_read(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float c[64];
  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(2.0f);
  simdgroup_store(m, c, 8);
  out[lane] = c[63u - lane];
}
kernel void matrix_store_barrier_read(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float c[64];
  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(2.0f);
  simdgroup_store(m, c, 8);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  out[lane] = c[63u - lane];
}

// simdgroup_q4_load given one lane index for every lane instead of each lane's own.
kernel void q4_load_wrong_lane(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  simdgroup_q4_block q;
  simdgroup_q4_load(q, (device const uchar*)out, 32u, 0u, ushort(0));
  out[lane] = 0.0f;
}

// Reads its input before await_inputs(), where with CUDA an earlier launch may still be writing it:
// out[64 + i] = out[i] read early, out[128 + i] = out[i] read after the wait. Under the emulator's
// pre-wait check the early read of the first threadgroup sees the poison.
kernel void reads_before_await(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  const float early = out[i];
  await_inputs();
  out[64u + i] = early;
  out[128u + i] = out[i];
}
