// The split rule of the split-K attention kernels (attention_partial, attention_combine): how many spans
// the key positions of one launch are cut into. Private to native/backends/gpu (and its kernel tests).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "params.h"

namespace moelens::gpu {

struct AttentionSplit {
  uint32_t splits;  // spans of key positions, one threadgroup each per (KV head, token)
  uint32_t span;    // key positions per span, a multiple of ATTN_SPLIT_BLOCK
};

// `tokens` query tokens of one launch over `keys` key positions on `kv_heads` KV heads: the fewest splits
// that give ATTN_SPLIT_TARGET_THREADGROUPS threadgroups, spans of at least ATTN_SPLIT_MIN_SPAN keys, at
// most ATTN_MAX_SPLITS. A decode step at 300 keys on 2 KV heads: 19 spans of 16 (38 threadgroups); at
// 4,096: 128 spans of 32 (256 threadgroups); at 32,768: 128 spans of 256 (256 threadgroups).
inline AttentionSplit attention_split(size_t tokens, size_t keys, size_t kv_heads) {
  const size_t per_split = std::max<size_t>(1, tokens * kv_heads);
  const size_t wanted = std::max<size_t>(1, (ATTN_SPLIT_TARGET_THREADGROUPS + per_split - 1) / per_split);
  size_t span = std::max<size_t>({ATTN_SPLIT_MIN_SPAN, (keys + wanted - 1) / wanted,
                                  (keys + ATTN_MAX_SPLITS - 1) / ATTN_MAX_SPLITS, size_t(1)});
  span = (span + ATTN_SPLIT_BLOCK - 1) / ATTN_SPLIT_BLOCK * ATTN_SPLIT_BLOCK;
  return {uint32_t(std::max<size_t>(1, (keys + span - 1) / span)), uint32_t(span)};
}

}  // namespace moelens::gpu
