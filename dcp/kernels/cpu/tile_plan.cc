// SPDX-License-Identifier: Apache-2.0
// Sub-tile classification of interval masks, and the per-row masking of partial sub-tiles.
#include "dcp/kernels/cpu/tile_plan.h"

#include <algorithm>
#include <limits>

namespace dcp::kernels {
namespace {

std::int32_t ceil_div(std::int32_t a, std::int32_t b) { return (a + b - 1) / b; }

}  // namespace

TilePlan plan_tile(TileMaskView mask, std::int32_t q_tokens, std::int32_t kv_tokens,
                   std::int32_t q_chunk, std::int32_t kv_chunk) {
  TilePlan plan;
  plan.q_chunk = q_chunk;
  plan.kv_chunk = kv_chunk;
  plan.q_chunks = q_tokens > 0 ? ceil_div(q_tokens, q_chunk) : 0;
  plan.kv_chunks = kv_tokens > 0 ? ceil_div(kv_tokens, kv_chunk) : 0;
  plan.cells.resize(static_cast<std::size_t>(plan.q_chunks) *
                    static_cast<std::size_t>(plan.kv_chunks));
  if (plan.cells.empty()) return plan;
  if (mask.full()) {
    for (std::int32_t qc = 0; qc < plan.q_chunks; ++qc) {
      for (std::int32_t kc = 0; kc < plan.kv_chunks; ++kc) {
        SubTile& cell = plan.cells[static_cast<std::size_t>(qc * plan.kv_chunks + kc)];
        cell.q_begin = qc * q_chunk;
        cell.q_end = std::min(q_tokens, cell.q_begin + q_chunk);
        cell.k_begin = kc * kv_chunk;
        cell.k_end = std::min(kv_tokens, cell.k_begin + kv_chunk);
      }
    }
    return plan;
  }
  // Bounding rectangle and number of attended elements per cell; a cell is full exactly when
  // the count equals the rectangle's area (a row's intervals are disjoint, so nothing counts
  // twice).
  constexpr std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  struct Bounds {
    std::int32_t q_lo = kMax, q_hi = -1, k_lo = kMax, k_hi = -1;
    std::int64_t covered = 0;
  };
  std::vector<Bounds> bounds(plan.cells.size());
  for (std::int32_t r = 0; r < q_tokens; ++r) {
    const std::int32_t qc = r / q_chunk;
    for (std::int32_t i = mask.row_offsets[r]; i < mask.row_offsets[r + 1]; ++i) {
      const std::int32_t a = mask.intervals[2 * i], b = mask.intervals[2 * i + 1];
      for (std::int32_t kc = a / kv_chunk; kc <= (b - 1) / kv_chunk; ++kc) {
        const std::int32_t lo = std::max(a, kc * kv_chunk);
        const std::int32_t hi = std::min(b, (kc + 1) * kv_chunk);
        Bounds& bd = bounds[static_cast<std::size_t>(qc * plan.kv_chunks + kc)];
        bd.q_lo = std::min(bd.q_lo, r);
        bd.q_hi = std::max(bd.q_hi, r + 1);
        bd.k_lo = std::min(bd.k_lo, lo);
        bd.k_hi = std::max(bd.k_hi, hi);
        bd.covered += hi - lo;
      }
    }
  }
  for (std::size_t c = 0; c < bounds.size(); ++c) {
    const Bounds& bd = bounds[c];
    if (bd.covered == 0) continue;  // stays empty
    SubTile& cell = plan.cells[c];
    cell.q_begin = bd.q_lo;
    cell.q_end = bd.q_hi;
    cell.k_begin = bd.k_lo;
    cell.k_end = bd.k_hi;
    cell.partial = bd.covered != cell.area();
  }
  return plan;
}

void mask_row(TileMaskView mask, std::int32_t r, std::int32_t k_begin, std::int32_t k_end,
              float* srow) {
  const std::int32_t* first = mask.intervals + 2 * mask.row_offsets[r];
  const std::int32_t count = mask.row_offsets[r + 1] - mask.row_offsets[r];
  // First interval ending after k_begin (ends are sorted because the intervals are).
  std::int32_t lo = 0, hi = count;
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo) / 2;
    if (first[2 * mid + 1] <= k_begin) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  std::int32_t c = k_begin;  // first key not yet classified
  for (std::int32_t i = lo; i < count && c < k_end; ++i) {
    const std::int32_t a = std::max(first[2 * i], k_begin);
    const std::int32_t b = std::min(first[2 * i + 1], k_end);
    for (; c < std::min(a, k_end); ++c) srow[c - k_begin] = kNegInf;
    c = std::max(c, b);
  }
  for (; c < k_end; ++c) srow[c - k_begin] = kNegInf;
}

}  // namespace dcp::kernels
