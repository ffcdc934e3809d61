// SPDX-License-Identifier: Apache-2.0
// The tensors a token block owns, and their sizes.
#include "dcp/model/tensor.h"

namespace dcp {

std::string_view to_string(TensorKind kind) {
  switch (kind) {
    case TensorKind::kQ:
      return "q";
    case TensorKind::kKV:
      return "kv";
    case TensorKind::kO:
      return "o";
    case TensorKind::kLse:
      return "lse";
    case TensorKind::kDO:
      return "do";
    case TensorKind::kDQ:
      return "dq";
    case TensorKind::kDKV:
      return "dkv";
  }
  return "?";
}

const std::vector<TensorKind>& all_tensor_kinds() {
  static const std::vector<TensorKind> kinds = {TensorKind::kQ,   TensorKind::kKV, TensorKind::kO,
                                                TensorKind::kLse, TensorKind::kDO, TensorKind::kDQ,
                                                TensorKind::kDKV};
  return kinds;
}

bool is_per_kv_head_block(TensorKind kind) {
  return kind == TensorKind::kKV || kind == TensorKind::kDKV;
}

std::int64_t bytes_per_token(TensorKind kind, const AttentionShape& shape,
                             const HeadBlocking& heads) {
  const std::int64_t d = shape.head_dim;
  const std::int64_t element = bytes_of(shape.dtype);
  switch (kind) {
    case TensorKind::kQ:
    case TensorKind::kO:
    case TensorKind::kDO:
    case TensorKind::kDQ:
      return heads.head_block_size() * d * element;
    case TensorKind::kKV:
    case TensorKind::kDKV:
      return 2 * heads.kv_block_size() * d * element;
    case TensorKind::kLse:
      return heads.head_block_size() * 4;
  }
  return 0;
}

std::int64_t bytes_per_token_all_heads(TensorKind kind, const AttentionShape& shape,
                                       const HeadBlocking& heads) {
  const std::int64_t groups = is_per_kv_head_block(kind) ? heads.kv_count() : heads.count();
  return groups * bytes_per_token(kind, shape, heads);
}

}  // namespace dcp
