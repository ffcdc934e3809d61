// SPDX-License-Identifier: Apache-2.0
// The shape of one attention layer: heads, head dimension, storage dtype, softmax scale.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dcp {

// Storage dtype of Q, K, V, O and their gradients. Accumulation is always fp32; LSE is fp32.
enum class DType { kBf16, kFp16, kFp32 };
inline constexpr int kDTypeCount = 3;  // the DType values, 0 .. kDTypeCount - 1

std::string_view to_string(DType dtype);
// Accepts "bf16", "fp16", "fp32" (and the aliases "bfloat16", "float16", "float32").
// Throws InvalidInput naming the text otherwise.
DType parse_dtype(std::string_view name);
std::int64_t bytes_of(DType dtype);

// Bounds that keep every size and FLOP figure far from integer overflow.
inline constexpr std::int32_t kMaxHeads = 1 << 14;
inline constexpr std::int32_t kMaxHeadDim = 1 << 14;

struct AttentionShape {
  std::int32_t q_heads = 8;
  std::int32_t kv_heads = 2;
  std::int32_t head_dim = 128;
  DType dtype = DType::kBf16;
  // 0 means the default 1/sqrt(head_dim).
  double softmax_scale = 0.0;

  // q heads per kv head (the GQA group size).
  std::int32_t group_size() const { return q_heads / kv_heads; }
  double effective_scale() const;
  friend bool operator==(const AttentionShape&, const AttentionShape&) = default;
};

// Throws InvalidInput naming the field unless heads and head_dim are in [1, kMaxHeads] and
// [1, kMaxHeadDim], q_heads is a multiple
// of kv_heads, and the scale is finite and not negative.
void validate(const AttentionShape& shape);

std::string to_string(const AttentionShape& shape);

}  // namespace dcp
