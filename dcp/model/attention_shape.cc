// SPDX-License-Identifier: Apache-2.0
// The shape of one attention layer.
#include "dcp/model/attention_shape.h"

#include <cmath>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

namespace dcp {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return "bf16";
    case DType::kFp16:
      return "fp16";
    case DType::kFp32:
      return "fp32";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return DType::kBf16;
  if (name == "fp16" || name == "float16") return DType::kFp16;
  if (name == "fp32" || name == "float32") return DType::kFp32;
  throw InvalidInput("unknown dtype " + quoted(name) + " (known: bf16, fp16, fp32)");
}

std::int64_t bytes_of(DType dtype) { return dtype == DType::kFp32 ? 4 : 2; }

double AttentionShape::effective_scale() const {
  return softmax_scale > 0.0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

void validate(const AttentionShape& shape) {
  if (shape.q_heads < 1 || shape.q_heads > kMaxHeads) {
    throw InvalidInput("q heads must be in [1, " + std::to_string(kMaxHeads) + "], got " +
                       std::to_string(shape.q_heads));
  }
  if (shape.kv_heads < 1 || shape.kv_heads > kMaxHeads) {
    throw InvalidInput("kv heads must be in [1, " + std::to_string(kMaxHeads) + "], got " +
                       std::to_string(shape.kv_heads));
  }
  if (shape.q_heads % shape.kv_heads != 0) {
    throw InvalidInput("q heads " + std::to_string(shape.q_heads) +
                       " is not divisible by kv heads " + std::to_string(shape.kv_heads));
  }
  if (shape.head_dim < 1 || shape.head_dim > kMaxHeadDim) {
    throw InvalidInput("head dim must be in [1, " + std::to_string(kMaxHeadDim) + "], got " +
                       std::to_string(shape.head_dim));
  }
  if (!std::isfinite(shape.softmax_scale) || shape.softmax_scale < 0.0) {
    throw InvalidInput("softmax scale must be a positive number, got " +
                       std::to_string(shape.softmax_scale));
  }
}

std::string to_string(const AttentionShape& shape) {
  return std::to_string(shape.q_heads) + " q heads, " + std::to_string(shape.kv_heads) +
         " kv heads, head dim " + std::to_string(shape.head_dim) + ", " +
         std::string(to_string(shape.dtype));
}

}  // namespace dcp
