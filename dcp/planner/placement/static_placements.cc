// SPDX-License-Identifier: Apache-2.0
// Zigzag and greedy largest-first placements.
#include "dcp/planner/placement/static_placements.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "dcp/core/error.h"

namespace dcp {

void place_work_with_q(const Workload& workload, Placement& placement) {
  placement.work_unit_device.reserve(static_cast<std::size_t>(workload.work_unit_count()));
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    const BlockId q = workload.blocks().block_id(unit.seq, unit.q_block);
    placement.work_unit_device.push_back(placement.token_block_device[static_cast<std::size_t>(q)]);
  }
}

DeviceId zigzag_chunk_device(std::int64_t chunk, std::int64_t parts) {
  return static_cast<DeviceId>(chunk < parts ? chunk : 2 * parts - 1 - chunk);
}

Workload recut_sequences(const Workload& workload, std::int64_t chunks, TileSelection selection,
                         std::int32_t head_block_size) {
  const SequenceBatch& batch = workload.batch();
  std::vector<TokenCount> sizes;
  std::vector<SequenceMask> masks;
  sizes.reserve(static_cast<std::size_t>(batch.size()));
  masks.reserve(static_cast<std::size_t>(batch.size()));
  for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
    sizes.push_back((batch.length(seq) + chunks - 1) / chunks);
    masks.push_back(workload.mask(seq));
  }
  return Workload(workload.shape(), batch, std::move(masks), sizes,
                  head_block_size > 0 ? head_block_size : workload.heads().head_block_size(),
                  selection);
}

ZigzagBaseline zigzag_baseline(const Workload& workload, const ClusterShape& cluster) {
  const std::int64_t p = cluster.devices();
  ZigzagBaseline zigzag{recut_sequences(workload, 2 * p), Placement{}};
  Placement& placement = zigzag.placement;
  placement.cluster = cluster;
  placement.token_block_device.reserve(
      static_cast<std::size_t>(zigzag.workload.blocks().block_count()));
  for (const TokenBlock& block : zigzag.workload.blocks().blocks())
    placement.token_block_device.push_back(zigzag_chunk_device(block.index, p));
  place_work_with_q(zigzag.workload, placement);
  return zigzag;
}

Placement zigzag_block_placement(const Workload& workload, const ClusterShape& cluster) {
  const std::int64_t p = cluster.devices();
  Placement placement;
  placement.cluster = cluster;
  placement.token_block_device.reserve(static_cast<std::size_t>(workload.blocks().block_count()));
  for (const TokenBlock& block : workload.blocks().blocks()) {
    const TokenCount length = workload.batch().length(block.seq);
    const std::int64_t chunk = block.begin * 2 * p / length;  // chunk holding the first token
    placement.token_block_device.push_back(zigzag_chunk_device(chunk, p));
  }
  place_work_with_q(workload, placement);
  return placement;
}

PackedPlacement packed_placement(const Workload& workload, const ClusterShape& cluster,
                                 double eps_memory, PackingRule rule, double token_pairs) {
  const BlockLayout& blocks = workload.blocks();
  const SequenceBatch& batch = workload.batch();
  const auto devices = static_cast<std::size_t>(cluster.devices());
  const double cap =
      (1 + eps_memory) * static_cast<double>(batch.total_tokens()) / static_cast<double>(devices);
  std::vector<TokenCount> held(devices, 0);
  std::vector<double> work(devices, 0);
  // Among [first, last), the device that takes `tokens` within the cap and ranks first under
  // `better`, or none; the lowest id on a tie.
  const auto fitting = [&](std::size_t first, std::size_t last, TokenCount tokens,
                           const auto& better) -> std::optional<std::size_t> {
    std::optional<std::size_t> best;
    for (std::size_t d = first; d < last; ++d) {
      if (static_cast<double>(held[d] + tokens) > cap) continue;
      if (!best || better(d, *best)) best = d;
    }
    return best;
  };
  const auto fewer_tokens = [&](std::size_t a, std::size_t b) { return held[a] < held[b]; };
  const auto whole_better = [&](std::size_t a, std::size_t b) {
    if (rule == PackingRule::kBestFit) return held[a] > held[b];
    return work[a] < work[b] || (work[a] == work[b] && held[a] < held[b]);
  };
  const auto lightest = [&] {
    return static_cast<std::size_t>(std::min_element(held.begin(), held.end()) - held.begin());
  };
  std::vector<SeqIndex> order(static_cast<std::size_t>(batch.size()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](SeqIndex a, SeqIndex b) { return batch.length(a) > batch.length(b); });
  PackedPlacement result;
  Placement& placement = result.placement;
  placement.cluster = cluster;
  placement.token_block_device.assign(static_cast<std::size_t>(blocks.block_count()), 0);
  const auto per_node = static_cast<std::size_t>(cluster.devices_per_node);
  for (const SeqIndex seq : order) {
    const std::optional<std::size_t> whole = fitting(0, devices, batch.length(seq), whole_better);
    const std::size_t home = whole ? *whole : lightest();
    const std::size_t node_first = home / per_node * per_node;
    for (LocalBlockIndex b = 0; b < blocks.blocks_in(seq); ++b) {
      const BlockId block = blocks.block_id(seq, b);
      const TokenCount tokens = blocks.block(block).tokens;
      std::size_t d = home;
      if (!whole) {
        const std::optional<std::size_t> in_node =
            fitting(node_first, node_first + per_node, tokens, fewer_tokens);
        d = in_node ? *in_node : lightest();
      }
      placement.token_block_device[static_cast<std::size_t>(block)] = static_cast<DeviceId>(d);
      held[d] += tokens;
    }
    // Its work runs with its q blocks (place_work_with_q below).
    for (const Tile& tile : workload.tiles_of(seq)) {
      work[static_cast<std::size_t>(placement.token_block_device[static_cast<std::size_t>(
          blocks.block_id(seq, tile.q_block))])] += static_cast<double>(tile.pairs);
    }
    for (LocalBlockIndex b = 0; b < blocks.blocks_in(seq); ++b) {
      const BlockId block = blocks.block_id(seq, b);
      work[static_cast<std::size_t>(
          placement.token_block_device[static_cast<std::size_t>(block)])] +=
          token_pairs * static_cast<double>(blocks.block(block).tokens);
    }
  }
  for (const TokenCount tokens : held) {
    result.within_bounds = result.within_bounds && static_cast<double>(tokens) <= cap;
  }
  place_work_with_q(workload, placement);
  return result;
}

ReblockedPlacement whole_sequences_reblocked(const Workload& workload, const Placement& placement,
                                             TokenCount block_size) {
  if (block_size < 1) {
    throw InvalidInput("block size must be at least 1, got " + std::to_string(block_size));
  }
  const BlockLayout& blocks = workload.blocks();
  const SequenceBatch& batch = workload.batch();
  std::vector<TokenCount> sizes;
  std::vector<SequenceMask> masks;
  std::vector<std::optional<DeviceId>> home(static_cast<std::size_t>(batch.size()));
  for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
    const DeviceId first =
        placement.token_block_device[static_cast<std::size_t>(blocks.block_id(seq, 0))];
    bool whole = true;
    for (LocalBlockIndex b = 1; b < blocks.blocks_in(seq) && whole; ++b) {
      whole =
          placement.token_block_device[static_cast<std::size_t>(blocks.block_id(seq, b))] == first;
    }
    if (whole) home[static_cast<std::size_t>(seq)] = first;
    sizes.push_back(whole ? block_size : blocks.block_size(seq));
    masks.push_back(workload.mask(seq));
  }
  ReblockedPlacement out{Workload(workload.shape(), batch, std::move(masks), sizes,
                                  workload.heads().head_block_size(), workload.tile_selection()),
                         Placement{}};
  const BlockLayout& cut = out.workload.blocks();
  out.placement.cluster = placement.cluster;
  out.placement.token_block_device.resize(static_cast<std::size_t>(cut.block_count()));
  for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
    for (LocalBlockIndex b = 0; b < cut.blocks_in(seq); ++b) {
      // A cut sequence keeps its blocks, and so their devices.
      const std::optional<DeviceId>& device = home[static_cast<std::size_t>(seq)];
      out.placement.token_block_device[static_cast<std::size_t>(cut.block_id(seq, b))] =
          device ? *device
                 : placement.token_block_device[static_cast<std::size_t>(blocks.block_id(seq, b))];
    }
  }
  place_work_with_q(out.workload, out.placement);
  return out;
}

Placement greedy_placement(const Workload& workload, const ClusterShape& cluster,
                           double eps_compute) {
  const auto devices = static_cast<std::size_t>(cluster.devices());
  Placement placement;
  placement.cluster = cluster;
  // Step 1: token blocks by LPT on tokens.
  const auto& blocks = workload.blocks().blocks();
  std::vector<BlockId> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](BlockId a, BlockId b) {
    return blocks[static_cast<std::size_t>(a)].tokens > blocks[static_cast<std::size_t>(b)].tokens;
  });
  std::vector<std::int64_t> memory(devices, 0);
  placement.token_block_device.assign(blocks.size(), 0);
  for (const BlockId b : order) {
    const auto d =
        static_cast<std::size_t>(std::min_element(memory.begin(), memory.end()) - memory.begin());
    placement.token_block_device[static_cast<std::size_t>(b)] = static_cast<DeviceId>(d);
    memory[d] += blocks[static_cast<std::size_t>(b)].tokens;
  }
  // Step 2: work units, heaviest first, next to their data when that keeps compute balanced.
  const WorkUnitId units = workload.work_unit_count();
  std::vector<WorkUnitId> unit_order(static_cast<std::size_t>(units));
  std::iota(unit_order.begin(), unit_order.end(), 0);
  std::stable_sort(unit_order.begin(), unit_order.end(), [&](WorkUnitId a, WorkUnitId b) {
    return workload.work_unit(a).pairs > workload.work_unit(b).pairs;
  });
  double total = 0;
  for (const Tile& tile : workload.tiles()) total += static_cast<double>(tile.pairs);
  total *= workload.heads().count();
  const double cap = (1 + eps_compute) * total / static_cast<double>(devices);
  std::vector<double> compute(devices, 0);
  placement.work_unit_device.assign(static_cast<std::size_t>(units), 0);
  for (const WorkUnitId w : unit_order) {
    const WorkUnit unit = workload.work_unit(w);
    const auto pairs = static_cast<double>(unit.pairs);
    const auto q = static_cast<std::size_t>(placement.token_block_device[static_cast<std::size_t>(
        workload.blocks().block_id(unit.seq, unit.q_block))]);
    const auto kv = static_cast<std::size_t>(placement.token_block_device[static_cast<std::size_t>(
        workload.blocks().block_id(unit.seq, unit.kv_block))]);
    std::size_t d = compute[kv] < compute[q] ? kv : q;
    if (compute[d] + pairs > cap) {
      d = static_cast<std::size_t>(std::min_element(compute.begin(), compute.end()) -
                                   compute.begin());
    }
    placement.work_unit_device[static_cast<std::size_t>(w)] = static_cast<DeviceId>(d);
    compute[d] += pairs;
  }
  return placement;
}

}  // namespace dcp
