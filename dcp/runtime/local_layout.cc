// SPDX-License-Identifier: Apache-2.0
// Where one rank's local tensors keep the token blocks the plan placed on it.
#include "dcp/runtime/local_layout.h"

#include <algorithm>
#include <string>

#include "dcp/core/error.h"

namespace dcp::runtime {

kernels::ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::kBf16:
      return kernels::ElementType::kBf16;
    case DType::kFp16:
      return kernels::ElementType::kFp16;
    case DType::kFp32:
      return kernels::ElementType::kFp32;
  }
  throw Error("unknown dtype");
}

std::size_t LocalLayout::q_elements() const {
  return static_cast<std::size_t>(tokens()) * static_cast<std::size_t>(q_heads) *
         static_cast<std::size_t>(head_dim);
}

std::size_t LocalLayout::kv_elements() const {
  return static_cast<std::size_t>(tokens()) * static_cast<std::size_t>(kv_heads) *
         static_cast<std::size_t>(head_dim);
}

std::size_t LocalLayout::lse_elements() const {
  return static_cast<std::size_t>(tokens()) * static_cast<std::size_t>(q_heads);
}

LocalLayout local_layout(const PlanHeader& header, const Program& program) {
  LocalLayout layout;
  layout.q_heads = header.q_heads;
  layout.kv_heads = header.kv_heads;
  layout.head_dim = header.head_dim;
  layout.storage = element_type(header.dtype);
  layout.offsets.push_back(0);
  for (const BlockId id : program.owned) {
    const auto it =
        std::lower_bound(program.blocks.begin(), program.blocks.end(), id,
                         [](const BlockInfo& block, BlockId wanted) { return block.id < wanted; });
    if (it == program.blocks.end() || it->id != id) {
      throw InvalidInput("device " + std::to_string(program.device) + ": owned block " +
                         std::to_string(id) + " is not in the Program's block list");
    }
    layout.blocks.push_back(*it);
    layout.offsets.push_back(layout.offsets.back() + it->tokens);
  }
  return layout;
}

}  // namespace dcp::runtime
