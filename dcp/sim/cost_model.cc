// SPDX-License-Identifier: Apache-2.0
// Kernel and memory costs of the simulator.
#include "dcp/sim/cost_model.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace dcp::sim {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The used rectangle and attended-pair count of one sub-tile.
struct Cell {
  std::int32_t q_lo = std::numeric_limits<std::int32_t>::max(), q_hi = -1;
  std::int32_t k_lo = std::numeric_limits<std::int32_t>::max(), k_hi = -1;
  std::int64_t attended = 0;
};

}  // namespace

SubtileWork subtile_work(const TileMask* mask, std::int32_t q_tokens, std::int32_t kv_tokens,
                         std::int32_t q_sub, std::int32_t kv_sub, bool whole) {
  SubtileWork work;
  if (q_tokens <= 0 || kv_tokens <= 0) return work;
  const std::int64_t q_cells = ceil_div(q_tokens, q_sub);
  const std::int64_t kv_cells = ceil_div(kv_tokens, kv_sub);
  const std::int64_t whole_area = std::int64_t{q_sub} * kv_sub;
  // Rows of q cell c (keys of kv cell c) as the kernel runs them.
  const auto rows = [&](std::int64_t c) {
    return whole ? q_sub : std::min<std::int64_t>(q_sub, q_tokens - c * q_sub);
  };
  const auto keys = [&](std::int64_t c) {
    return whole ? kv_sub : std::min<std::int64_t>(kv_sub, kv_tokens - c * kv_sub);
  };
  if (mask == nullptr) {
    work.subtiles = q_cells * kv_cells;
    work.full_area = whole ? work.subtiles * whole_area : std::int64_t{q_tokens} * kv_tokens;
    for (std::int64_t c = 0; c < q_cells; ++c) work.loop_rows += rows(c);
    for (std::int64_t c = 0; c < kv_cells; ++c) work.loop_keys += keys(c);
    return work;
  }
  std::vector<Cell> cells(static_cast<std::size_t>(q_cells * kv_cells));
  for (std::int32_t r = 0; r < q_tokens; ++r) {
    const std::int64_t qc = r / q_sub;
    const auto first = static_cast<std::size_t>(mask->row_offsets[static_cast<std::size_t>(r)]);
    const auto last = static_cast<std::size_t>(mask->row_offsets[static_cast<std::size_t>(r) + 1]);
    for (std::size_t i = first; i < last; ++i) {
      const std::int32_t a = mask->intervals[2 * i];
      const std::int32_t b = mask->intervals[2 * i + 1];
      for (std::int32_t kc = a / kv_sub; kc <= (b - 1) / kv_sub; ++kc) {
        const std::int32_t lo = std::max(a, kc * kv_sub);
        const std::int32_t hi = std::min(b, (kc + 1) * kv_sub);
        Cell& cell = cells[static_cast<std::size_t>(qc * kv_cells + kc)];
        cell.q_lo = std::min(cell.q_lo, r);
        cell.q_hi = std::max(cell.q_hi, r + 1);
        cell.k_lo = std::min(cell.k_lo, lo);
        cell.k_hi = std::max(cell.k_hi, hi);
        cell.attended += hi - lo;
      }
    }
  }
  std::vector<bool> row_used(static_cast<std::size_t>(q_cells), false);
  std::vector<bool> key_used(static_cast<std::size_t>(kv_cells), false);
  for (std::size_t c = 0; c < cells.size(); ++c) {
    const Cell& cell = cells[c];
    if (cell.attended == 0) continue;
    const std::int64_t used = std::int64_t{cell.q_hi - cell.q_lo} * (cell.k_hi - cell.k_lo);
    ++work.subtiles;
    (cell.attended == used ? work.full_area : work.partial_area) += whole ? whole_area : used;
    row_used[c / static_cast<std::size_t>(kv_cells)] = true;
    key_used[c % static_cast<std::size_t>(kv_cells)] = true;
  }
  for (std::int64_t c = 0; c < q_cells; ++c) {
    if (row_used[static_cast<std::size_t>(c)]) work.loop_rows += rows(c);
  }
  for (std::int64_t c = 0; c < kv_cells; ++c) {
    if (key_used[static_cast<std::size_t>(c)]) work.loop_keys += keys(c);
  }
  return work;
}

ExecutorModel reference_executor() {
  ExecutorModel model;
  // A Python handler per instruction (kernel arguments prepared once per plan, so mostly the
  // interpreter and the launch itself), estimate.
  model.instruction_overhead = 20e-6;
  model.packs_messages = true;        // fused copy into one send buffer per dtype, and out again
  model.launches_whole_group = true;  // dist.all_to_all_single over the whole DCP group
  // It has no kept tensor (its backward plan moves kv again); the plans standing in for its
  // planner keep kv, and are priced with a copy per Keep and Restore as its handlers would run.
  model.copies_kept = true;
  return model;
}

ExecutorModel zigzag_baseline_executor() {
  ExecutorModel model;
  // zhuzilin's zigzag varlen attention builds each half's token index in a Python loop over the
  // batch's sequences; the three baselines' measured times grow with the number of sequences
  // where the simulated ones do not (docs/cost_model.md). Fitted to the paper's
  // LongDataCollections causal baseline cells with the a100-p4de constants held
  // (`dcp bench --suite paper --fit --fit-parameters sequence_overhead_us --batches 3`, which
  // gives 16.5995 us).
  model.sequence_overhead = 16.6e-6;
  return model;
}

CostModel::CostModel(const ClusterSpec& spec, const PlanHeader& header) : spec_(spec) {
  validate(spec_);
  // FLOPs per pair and q head: 4 d forward (QK^T, PV), 10 d backward (the recomputed S, dV, dP,
  // dQ, dK). The rates are sustained on full tiles at head dim 128; the share `softmax_share` of
  // that time does not scale with the head dim.
  constexpr double kReferenceHeadDim = 128;
  const double dim_scale =
      (1 - spec_.softmax_share) * header.head_dim / kReferenceHeadDim + spec_.softmax_share;
  const double dtype_factor = header.dtype == DType::kFp32 ? spec_.fp32_kernel_factor : 1.0;
  const double heads = header.head_block_size;
  pair_seconds_[0] = 4 * kReferenceHeadDim / spec_.forward_flops * dim_scale * dtype_factor * heads;
  pair_seconds_[1] =
      10 * kReferenceHeadDim / spec_.backward_flops * dim_scale * dtype_factor * heads;
  // A kernel runs each head's sub-tiles (the cpu kernels' tasks, a GPU kernel's programs).
  subtile_seconds_ = spec_.subtile_overhead * heads;
}

double CostModel::pair_seconds(Pass pass) const {
  return pair_seconds_[pass == Pass::kForward ? 0 : 1];
}

double CostModel::tile_seconds(Pass pass, const TileMask* mask, std::int32_t q_tokens,
                               std::int32_t kv_tokens) const {
  const bool forward = pass == Pass::kForward;
  const SubtileWork work = subtile_work(
      mask, q_tokens, kv_tokens, forward ? spec_.forward_subtile_q : spec_.backward_subtile_q,
      forward ? spec_.forward_subtile_kv : spec_.backward_subtile_kv, spec_.whole_subtiles);
  const double setup =
      spec_.tile_setup_tokens * static_cast<double>(forward ? work.loop_rows : work.loop_keys);
  const double pairs = static_cast<double>(work.full_area) +
                       static_cast<double>(work.partial_area) * (1 + spec_.partial_subtile_extra) +
                       setup;
  return pairs * pair_seconds(pass) + static_cast<double>(work.subtiles) * subtile_seconds_;
}

double CostModel::memory_seconds(std::int64_t bytes) const {
  return static_cast<double>(bytes) / spec_.memory_bandwidth;
}

}  // namespace dcp::sim
