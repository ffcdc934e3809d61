// SPDX-License-Identifier: Apache-2.0
// Where one rank's local tensors keep the token blocks the plan placed on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/kernels/attention_kernels.h"
#include "dcp/program/program.h"

namespace dcp::runtime {

kernels::ElementType element_type(DType dtype);

// The local tensors of one rank hold the tokens of the blocks it owns (Program::owned), in that
// order, concatenated; every head of a token is local (head blocks only split the work):
//   q, o, do, dq   [tokens][q_heads][head_dim]    storage dtype
//   k, v, dk, dv   [tokens][kv_heads][head_dim]   storage dtype
//   lse            [q_heads][tokens]              fp32
// A block's first local token is block_offset(i) for the i-th owned block.
struct LocalLayout {
  std::vector<BlockInfo> blocks;      // the owned blocks, in local order
  std::vector<std::int64_t> offsets;  // first local token of each block, then the total
  std::int32_t q_heads = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  kernels::ElementType storage = kernels::ElementType::kFp32;

  std::int64_t tokens() const { return offsets.empty() ? 0 : offsets.back(); }
  std::size_t q_elements() const;   // q, o, do, dq
  std::size_t kv_elements() const;  // k, v, dk, dv (each)
  std::size_t lse_elements() const;
  std::size_t q_bytes() const { return q_elements() * kernels::element_size(storage); }
  std::size_t kv_bytes() const { return kv_elements() * kernels::element_size(storage); }
};

// The layout of `program`'s owned blocks. Throws InvalidInput if an owned block is missing from
// Program::blocks.
LocalLayout local_layout(const PlanHeader& header, const Program& program);

}  // namespace dcp::runtime
