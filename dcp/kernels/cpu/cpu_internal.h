// SPDX-License-Identifier: Apache-2.0
// Pieces shared by the CPU forward and backward: sub-tile sizes, fp32 views of the inputs, the
// log-sum-exp merge of one row and the entry points of the two passes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "dcp/core/ids.h"
#include "dcp/core/thread_pool.h"

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels {

// Sub-tile sizes. Forward: the S block (q x kv) of 128 x 256 fp32 is 128 KiB and stays in L2
// while PV reads it; backward keeps P and dS (2 x 64 KiB) plus a 128-key dk, dv accumulator hot.
constexpr std::int32_t kForwardQChunk = 128;
constexpr std::int32_t kForwardKvChunk = 256;
constexpr std::int32_t kBackwardQChunk = 128;
constexpr std::int32_t kBackwardKvChunk = 128;

// Throws InvalidInput unless q_heads, kv_heads, head_dim >= 1 and kv_heads divides q_heads.
void check_params(const AttentionParams& params);

// fp32 views of storage-type arrays: fp32 inputs are used in place; bf16 and fp16 ones are
// converted once per call (an array shared by several rows or tiles only once), in parallel.
class Fp32Inputs {
 public:
  explicit Fp32Inputs(ElementType type) : type_(type) {}
  void add(const void* src, std::size_t n);
  void convert(ThreadPool& pool);
  const float* get(const void* src) const;

 private:
  ElementType type_;
  std::unordered_map<const void*, std::vector<float>> converted_;
  std::unordered_map<const void*, std::size_t> sizes_;
};

// Merges (o2, l2) into (o1, l1), partials over disjoint keys: M = max(l1, l2),
// l = M + log(exp(l1 - M) + exp(l2 - M)), o = exp(l1 - l) o1 + exp(l2 - l) o2, in fp32. A -inf
// side weighs exactly 0 and both -inf give o = 0, l = -inf (no exp(-inf - (-inf)) anywhere).
void merge_row(float* o1, float& l1, const float* o2, float l2, std::int32_t head_dim);

void cpu_forward(ThreadPool& pool, const AttentionParams& params, std::span<const ForwardRow> rows);
void cpu_backward(ThreadPool& pool, const AttentionParams& params,
                  std::span<const BackwardRow> rows);

}  // namespace dcp::kernels
