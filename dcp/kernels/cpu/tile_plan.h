// SPDX-License-Identifier: Apache-2.0
// Cuts an interval-masked tile into q chunk x kv chunk sub-tiles and classifies each one as
// empty (skipped), full (no mask work) or partial (per-element mask), trimmed to its used part.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels {

// The part of one sub-tile that any row attends to: rows [q_begin, q_end) and keys
// [k_begin, k_end), relative to the tile. Empty when q_begin == q_end. `partial` means some
// element of that rectangle is masked, so the kernel must mask element-wise.
struct SubTile {
  std::int32_t q_begin = 0, q_end = 0;
  std::int32_t k_begin = 0, k_end = 0;
  bool partial = false;
  bool empty() const { return q_begin == q_end; }
  std::int64_t area() const { return std::int64_t{q_end - q_begin} * (k_end - k_begin); }
};

struct TilePlan {
  std::int32_t q_chunk = 1, kv_chunk = 1;
  std::int32_t q_chunks = 0, kv_chunks = 0;
  std::vector<SubTile> cells;  // [q chunk][kv chunk]
  const SubTile& cell(std::int32_t qc, std::int32_t kc) const {
    return cells[static_cast<std::size_t>(qc) * static_cast<std::size_t>(kv_chunks) +
                 static_cast<std::size_t>(kc)];
  }
};

// The plan of a q_tokens x kv_tokens tile. Cost is linear in the mask's intervals plus the kv
// chunks they cross.
TilePlan plan_tile(TileMaskView mask, std::int32_t q_tokens, std::int32_t kv_tokens,
                   std::int32_t q_chunk, std::int32_t kv_chunk);

// Sets srow[c - k_begin] = -inf for every key c in [k_begin, k_end) that row r of the mask does
// not attend (keys outside the row's intervals), leaving attended keys untouched.
void mask_row(TileMaskView mask, std::int32_t r, std::int32_t k_begin, std::int32_t k_end,
              float* srow);

}  // namespace dcp::kernels
