// SPDX-License-Identifier: Apache-2.0
// Chooses the token block size B for a batch when the user gives none.
#include "dcp/model/block_size_heuristic.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <optional>
#include <queue>
#include <string>

#include "dcp/core/error.h"
#include "dcp/core/packing.h"

#include "dcp/model/workload.h"

namespace dcp {
namespace {

// Work items one largest-first packing takes at most (32 MiB of weights).
constexpr std::int64_t kMaxLptItems = std::int64_t{1} << 22;

}  // namespace

double lpt_imbalance(std::vector<std::int64_t> items, std::int32_t bins) {
  std::int64_t total = 0;
  for (const std::int64_t item : items) total += item;
  if (total == 0) return 1.0;
  return static_cast<double>(largest_first_max_load(std::move(items), bins)) * bins /
         static_cast<double>(total);
}

BlockSizeChoice choose_block_size(const AttentionShape& shape, const SequenceBatch& batch,
                                  const std::vector<SequenceMask>& masks,
                                  std::int32_t head_block_size, const BlockSizeOptions& options) {
  if (options.devices < 1) {
    throw InvalidInput("devices must be >= 1, got " + std::to_string(options.devices));
  }
  if (!(options.eps_memory >= 0) || !(options.eps_compute >= 0)) {
    throw InvalidInput("imbalance epsilons must be >= 0");
  }
  if (options.min_block < 1 || options.min_block > options.max_block) {
    throw InvalidInput("block size range [" + std::to_string(options.min_block) + ", " +
                       std::to_string(options.max_block) + "] is empty");
  }
  const auto top = std::min<TokenCount>(
      options.max_block,
      static_cast<TokenCount>(std::bit_ceil(static_cast<std::uint64_t>(batch.max_length()))));
  const TokenCount bottom = std::min(options.min_block, top);

  BlockSizeChoice best;
  double best_score = 0;
  // Step 1: from the largest candidate down, the first that meets both targets wins.
  for (TokenCount b = top; b >= bottom; b /= 2) {
    std::optional<Workload> built;
    try {
      built.emplace(shape, batch, masks, b, head_block_size);
    } catch (const InvalidInput&) {
      // Too many blocks or tiles: smaller candidates would only have more. Invalid shapes fail
      // on the first candidate and reach the caller.
      if (best.block_size == 0) throw;
      break;
    }
    const Workload& workload = *built;
    std::vector<std::int64_t> tokens;
    tokens.reserve(workload.blocks().blocks().size());
    for (const TokenBlock& block : workload.blocks().blocks()) tokens.push_back(block.tokens);
    // Every head block has the same tiles. When tiles x head blocks is too many items to pack,
    // head blocks are packed in groups of `copies` (a coarser, so never optimistic, estimate).
    const std::int64_t head_blocks = workload.heads().count();
    const std::int64_t tiles = workload.tile_count();
    const std::int64_t copies =
        std::max<std::int64_t>(1, (head_blocks * tiles + kMaxLptItems - 1) / kMaxLptItems);
    std::vector<std::int64_t> work;
    work.reserve(static_cast<std::size_t>(tiles * ((head_blocks + copies - 1) / copies)));
    for (std::int64_t first = 0; first < head_blocks; first += copies) {
      const std::int64_t group = std::min(copies, head_blocks - first);
      for (const Tile& tile : workload.tiles()) work.push_back(tile.pairs * group);
    }
    BlockSizeChoice choice;
    choice.block_size = b;
    choice.memory_imbalance = lpt_imbalance(std::move(tokens), options.devices);
    choice.compute_imbalance = lpt_imbalance(std::move(work), options.devices);
    choice.meets_targets = choice.memory_imbalance <= 1 + options.eps_memory + 1e-12 &&
                           choice.compute_imbalance <= 1 + options.eps_compute + 1e-12;
    const double score = std::max(choice.memory_imbalance / (1 + options.eps_memory),
                                  choice.compute_imbalance / (1 + options.eps_compute));
    choice.candidates_tried = best.candidates_tried + 1;
    // Step 2: otherwise remember the candidate closest to its targets (larger B on ties).
    if (best.block_size == 0 || score < best_score) {
      best = choice;
      best_score = score;
    }
    best.candidates_tried = choice.candidates_tried;
    if (choice.meets_targets) return choice;
    if (b == 1) break;
  }
  return best;
}

}  // namespace dcp
