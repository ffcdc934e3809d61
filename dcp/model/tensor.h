// SPDX-License-Identifier: Apache-2.0
// The tensors a token block owns in forward and backward, and their sizes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/model/attention_shape.h"
#include "dcp/model/block_layout.h"

namespace dcp {

// Forward reads Q and KV and writes O and LSE; backward reads Q, KV, O, LSE and dO and writes
// dQ and dKV. KV (and dKV) is per kv head block; the others are per q head block.
enum class TensorKind { kQ, kKV, kO, kLse, kDO, kDQ, kDKV };

std::string_view to_string(TensorKind kind);
const std::vector<TensorKind>& all_tensor_kinds();
bool is_per_kv_head_block(TensorKind kind);

// Bytes one token of `kind` takes for one head block of it (kv head block for KV and dKV).
// Q, O, dO, dQ: h * d * dtype; KV, dKV: 2 * kv_block_size * d * dtype; LSE: h * 4 (always fp32).
std::int64_t bytes_per_token(TensorKind kind, const AttentionShape& shape,
                             const HeadBlocking& heads);

// Bytes one token of `kind` takes over all heads.
std::int64_t bytes_per_token_all_heads(TensorKind kind, const AttentionShape& shape,
                                       const HeadBlocking& heads);

// Bytes of one tensor of a token block over all heads: what moves when the block's tensor is
// needed on another device for every head block.
inline std::int64_t token_block_bytes(TensorKind kind, const TokenBlock& block,
                                      const AttentionShape& shape, const HeadBlocking& heads) {
  return block.tokens * bytes_per_token_all_heads(kind, shape, heads);
}

// Forward FLOPs of one work unit: 4 * pairs * head_dim per q head (QK^T and PV, 2 FLOPs per
// multiply-add), times the heads of the head block.
// FLOPs are doubles: 4 * pairs * d * heads can leave int64 for the largest batches.
inline double forward_flops(PairCount pairs, const AttentionShape& shape,
                            const HeadBlocking& heads) {
  return 4.0 * static_cast<double>(pairs) * shape.head_dim * heads.head_block_size();
}
// Backward FLOPs: 2.5x forward (dV, dP, dQ, dK plus the recomputed S), i.e. 10 * pairs * d per
// head.
inline double backward_flops(PairCount pairs, const AttentionShape& shape,
                             const HeadBlocking& heads) {
  return 2.5 * forward_flops(pairs, shape, heads);
}

}  // namespace dcp
