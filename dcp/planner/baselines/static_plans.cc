// SPDX-License-Identifier: Apache-2.0
// Static strategies' layouts: names, data-parallel groups, chunks, placement and ring geometry.
#include "dcp/planner/baselines/static_plans.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/model/tensor.h"

#include "dcp/planner/baselines/static_rings.h"
#include "dcp/planner/placement/static_placements.h"

namespace dcp {

std::int32_t head_degree(const HeadBlocking& heads, std::int32_t group_size) {
  for (std::int32_t a = std::min(heads.kv_count(), group_size); a > 1; --a) {
    if (heads.count() % a == 0 && group_size % a == 0) return a;
  }
  return 1;
}

std::int32_t automatic_data_parallel(Strategy strategy, const SequenceBatch& batch,
                                     const ClusterShape& cluster) {
  if (is_dcp(strategy)) return 1;
  TokenCount batch_bound = 1;  // the smallest power of two >= the batch's tokens
  while (batch_bound < batch.total_tokens()) batch_bound *= 2;
  const std::int32_t devices = cluster.devices();
  std::int32_t d = 1;
  while (devices % (2 * d) == 0 && 2 * d * batch.max_length() <= batch_bound &&
         (strategy != Strategy::kHybrid || cluster.nodes % (2 * d) == 0)) {
    d *= 2;
  }
  return d;
}

std::int32_t parse_data_parallel(std::string_view text) {
  if (text == "auto") return 0;
  std::int64_t d = 0;
  try {
    d = parse_int(text, "the data parallel degree");
  } catch (const InvalidInput&) {
    d = 0;
  }
  if (d < 1 || d > 65536) {
    throw InvalidInput(
        "the data parallel degree must be auto or a whole number in [1, 65536], got " +
        quoted(text));
  }
  return static_cast<std::int32_t>(d);
}

namespace {

std::string strategy_name(Strategy strategy) { return std::string(to_string(strategy)); }

// The data-parallel group of every sequence: longest first, each to the group with the fewest
// tokens so far (the lowest on a tie).
std::vector<std::int32_t> sequence_groups(const SequenceBatch& batch, std::int32_t groups) {
  std::vector<SeqIndex> order(static_cast<std::size_t>(batch.size()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](SeqIndex a, SeqIndex b) { return batch.length(a) > batch.length(b); });
  std::vector<TokenCount> tokens(static_cast<std::size_t>(groups), 0);
  std::vector<std::int32_t> group_of(static_cast<std::size_t>(batch.size()), 0);
  for (const SeqIndex s : order) {
    const auto g = std::min_element(tokens.begin(), tokens.end()) - tokens.begin();
    group_of[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(g);
    tokens[static_cast<std::size_t>(g)] += batch.length(s);
  }
  return group_of;
}

// The degree asked for, checked against the devices.
std::int32_t data_parallel_degree(Strategy strategy, const Workload& workload,
                                  const ClusterShape& cluster, std::int32_t asked) {
  if (asked == 0) return automatic_data_parallel(strategy, workload.batch(), cluster);
  const std::int32_t devices = cluster.devices();
  if (asked < 0 || asked > devices || devices % asked != 0) {
    throw InvalidInput(strategy_name(strategy) + ": data parallel degree " + std::to_string(asked) +
                       " does not divide the " + std::to_string(devices) + " devices into groups");
  }
  return asked;
}

// The ring geometry of a strategy on groups of `group_size` devices; throws InvalidInput if the
// strategy cannot split its heads that way.
RingLayout ring_layout(Strategy strategy, const Workload& workload, const ClusterShape& cluster,
                       std::int32_t group_size, std::int32_t data_parallel,
                       std::int32_t loongtrain_window) {
  const HeadBlockIndex head_blocks = workload.heads().count();
  const auto need_heads = [&](std::int32_t devices, const char* what) {
    if (devices > head_blocks) {
      throw InvalidInput(strategy_name(strategy) + " splits q heads over " + what + ": " +
                         std::to_string(devices) + " devices but only " +
                         std::to_string(head_blocks) + " q head blocks");
    }
  };
  RingLayout layout;
  layout.group_size = group_size;
  switch (strategy) {
    case Strategy::kRing:
    case Strategy::kZigzag:
      break;
    case Strategy::kUlysses:
      need_heads(group_size, data_parallel > 1 ? "the devices of a group" : "all devices");
      layout.head_degree = group_size;
      layout.all_to_all = true;
      break;
    case Strategy::kHybrid:
      need_heads(cluster.devices_per_node, "the devices of a node");
      if (group_size % cluster.devices_per_node != 0) {
        throw InvalidInput("hybrid with data parallel degree " + std::to_string(data_parallel) +
                           " needs whole nodes per group: groups of " + std::to_string(group_size) +
                           " devices, nodes of " + std::to_string(cluster.devices_per_node));
      }
      layout.head_degree = cluster.devices_per_node;
      layout.all_to_all = true;
      break;
    case Strategy::kTe:
    case Strategy::kLoongTrain:
      layout.head_degree = head_degree(workload.heads(), group_size);
      layout.all_to_all = true;
      break;
    default:
      throw InvalidInput(strategy_name(strategy) + " is not a static strategy");
  }
  const std::int32_t ring = layout.ring_size();
  layout.window = ring;
  if (strategy == Strategy::kLoongTrain) {
    if (loongtrain_window < 0) {
      throw InvalidInput("loongtrain window " + std::to_string(loongtrain_window) + " is negative");
    }
    if (loongtrain_window > 0) {
      layout.window = std::min(loongtrain_window, ring);
      if (ring % layout.window != 0) {
        throw InvalidInput("loongtrain window " + std::to_string(loongtrain_window) +
                           " does not divide the ring of " + std::to_string(ring) + " head groups");
      }
    } else {
      // The head groups per node, as many as divide the ring.
      layout.window = std::min(ring, std::max(1, cluster.devices_per_node / layout.head_degree));
      while (ring % layout.window != 0) --layout.window;
    }
  }
  return layout;
}

// The q heads one device of a head group computes, as one head block: static systems run one
// kernel over all of them, so their Programs need no finer head blocks (fewer work units, the
// same tiles). The workload's own head block size where that grouping is not a valid one.
std::int32_t device_head_block_size(const Workload& workload, const RingLayout& layout) {
  const AttentionShape& shape = workload.shape();
  const std::int32_t own = workload.heads().head_block_size();
  if (shape.q_heads % layout.head_degree != 0) return own;
  const std::int32_t size = shape.q_heads / layout.head_degree;
  const std::int32_t group = shape.group_size();
  const bool valid = group % size == 0 || size % group == 0;
  return valid && size % own == 0 ? size : own;
}

}  // namespace

std::vector<std::int32_t> loongtrain_windows(const HeadBlocking& heads, std::int32_t group_size) {
  const std::int32_t ring = group_size / head_degree(heads, group_size);
  std::vector<std::int32_t> windows = {1};
  for (std::int32_t w = 2; w < ring; w *= 2) {
    if (ring % w == 0) windows.push_back(w);
  }
  return windows;
}

StaticPlan static_plan(Strategy strategy, const Workload& workload, const ClusterShape& cluster,
                       const StaticOptions& options) {
  const TileSelection selection = options.masked_tiles == MaskedTiles::kCompute
                                      ? TileSelection::kEveryBlockPair
                                      : TileSelection::kUnmasked;
  validate(cluster);
  if (is_dcp(strategy)) throw InvalidInput(strategy_name(strategy) + " is not a static strategy");
  const std::int32_t data_parallel =
      data_parallel_degree(strategy, workload, cluster, options.data_parallel);
  const std::int32_t group_size = cluster.devices() / data_parallel;
  const RingLayout layout = ring_layout(strategy, workload, cluster, group_size, data_parallel,
                                        options.loongtrain_window);
  // Ring and Ulysses cut each sequence into C chunks, the others into 2C: zigzag over the ring,
  // each ring chunk split over the a devices of a head group.
  const bool zigzag = strategy != Strategy::kRing && strategy != Strategy::kUlysses;
  StaticPlan plan{
      recut_sequences(workload, zigzag ? 2 * group_size : group_size, selection,
                      options.device_head_blocks ? device_head_block_size(workload, layout)
                                                 : workload.heads().head_block_size()),
      Placement{},
      {},
      {},
      data_parallel,
      layout};
  Placement& placement = plan.placement;
  placement.cluster = cluster;
  const std::vector<std::int32_t> group_of = sequence_groups(workload.batch(), data_parallel);
  const std::int32_t a = layout.head_degree;
  placement.token_block_device.reserve(
      static_cast<std::size_t>(plan.workload.blocks().block_count()));
  for (const TokenBlock& block : plan.workload.blocks().blocks()) {
    const DeviceId local =
        zigzag ? zigzag_chunk_device(block.index / a, layout.ring_size()) * a + block.index % a
               : static_cast<DeviceId>(block.index);
    placement.token_block_device.push_back(
        group_of[static_cast<std::size_t>(block.seq)] * group_size + local);
  }
  // Work runs with its q chunk, on the device of its head block in the q chunk's head group.
  const BlockLayout& blocks = plan.workload.blocks();
  const HeadBlockIndex head_blocks = plan.workload.heads().count();
  placement.work_unit_device.reserve(static_cast<std::size_t>(plan.workload.work_unit_count()));
  for (WorkUnitId u = 0; u < plan.workload.work_unit_count(); ++u) {
    const WorkUnit unit = plan.workload.work_unit(u);
    const DeviceId q =
        placement
            .token_block_device[static_cast<std::size_t>(blocks.block_id(unit.seq, unit.q_block))];
    placement.work_unit_device.push_back(
        layout.device(layout.group_base(q), layout.position(q),
                      layout.head_local_of(unit.head_block, head_blocks)));
  }
  plan.forward = static_pass(plan.workload, plan.placement, Pass::kForward, layout);
  plan.backward = static_pass(plan.workload, plan.placement, Pass::kBackward, layout);
  return plan;
}

double static_estimate_lower_bound(Strategy strategy, const Workload& workload,
                                   const ClusterSpec& cluster, const StaticOptions& options,
                                   const PlanHeader& header) {
  const ClusterShape& shape = cluster.shape;
  validate(shape);
  if (is_dcp(strategy)) throw InvalidInput(strategy_name(strategy) + " is not a static strategy");
  const std::int32_t data_parallel =
      data_parallel_degree(strategy, workload, shape, options.data_parallel);
  const std::int32_t group_size = shape.devices() / data_parallel;
  const RingLayout layout =
      ring_layout(strategy, workload, shape, group_size, data_parallel, options.loongtrain_window);
  // Compute: every unmasked pair, spread evenly (a masked-tile system computes more).
  PairCount pairs = 0;
  for (WorkUnitId u = 0; u < workload.work_unit_count(); ++u) pairs += workload.work_unit(u).pairs;
  const double mean_compute[2] = {forward_flops(pairs, workload.shape(), workload.heads()) /
                                      cluster.forward_flops / shape.devices(),
                                  backward_flops(pairs, workload.shape(), workload.heads()) /
                                      cluster.backward_flops / shape.devices()};
  // The tokens each ring position of each group holds, chunked as static_plan cuts them.
  const bool zigzag = strategy != Strategy::kRing && strategy != Strategy::kUlysses;
  const std::int64_t chunks = zigzag ? 2 * group_size : group_size;
  const std::int32_t ring = layout.ring_size();
  const std::int32_t a = layout.head_degree;
  const std::vector<std::int32_t> group_of = sequence_groups(workload.batch(), data_parallel);
  std::vector<TokenCount> tokens(static_cast<std::size_t>(data_parallel * ring), 0);
  for (SeqIndex seq = 0; seq < workload.batch().size(); ++seq) {
    const TokenCount length = workload.batch().length(seq);
    const TokenCount chunk = (length + chunks - 1) / chunks;
    for (std::int64_t k = 0; k < chunks && k * chunk < length; ++k) {
      const std::int64_t position =
          zigzag ? zigzag_chunk_device(k / a, ring) : static_cast<std::int64_t>(k / a);
      tokens[static_cast<std::size_t>(group_of[static_cast<std::size_t>(seq)] * ring + position)] +=
          std::min(chunk, length - k * chunk);
    }
  }
  // The kv head blocks each local index of a head group reads (as static_pass sends them).
  const HeadBlocking& heads = workload.heads();
  std::vector<std::int32_t> kv_reads(static_cast<std::size_t>(a), 0);
  for (std::int32_t g = 0; g < heads.kv_count(); ++g) {
    std::vector<bool> reads(static_cast<std::size_t>(a), false);
    for (HeadBlockIndex h = 0; h < heads.count(); ++h) {
      if (heads.kv_block_of(h) == g) {
        reads[static_cast<std::size_t>(layout.head_local_of(h, heads.count()))] = true;
      }
    }
    for (std::int32_t l = 0; l < a; ++l)
      kv_reads[static_cast<std::size_t>(l)] += reads[static_cast<std::size_t>(l)] ? 1 : 0;
  }
  const auto efficiency_bound = [](const std::vector<SizeEfficiency>& curve) {
    double e = 1;
    for (const SizeEfficiency& point : curve) e = std::max(e, point.efficiency);
    return e;
  };
  const double rate[2] = {std::min(cluster.intra_node_bandwidth, cluster.stream_bandwidth(false)) *
                              efficiency_bound(cluster.intra_node_efficiency),
                          std::min(cluster.nic_bandwidth(), cluster.stream_bandwidth(true)) *
                              efficiency_bound(cluster.inter_node_efficiency)};
  const double latency[2] = {cluster.intra_node_latency, cluster.inter_node_latency};
  // A launch that brings kv has at least that one peer to set up.
  const double setup = cluster.launch_overhead + cluster.launch_peer_overhead;
  // Each device's chain: per launch, the slowest kv message it receives. An outer hop of a double
  // ring goes whole in its round's first launch or spread over the round's launches
  // (spread_outer_hops); either way the round's launches take no less than the inner hops'
  // launches alone, nor than the outer hop alone at the smaller latency: whole, its launch takes
  // the longer of it and that launch's inner hop; spread, each launch the longer of its inner hop
  // and its share, whose set-ups, latencies and bytes add up to at least the hop's.
  double chain = 0;
  std::vector<double> launch_seconds, outer_seconds;
  for (std::int32_t group = 0; group < data_parallel; ++group) {
    const DeviceId base = group * group_size;
    for (std::int32_t p = 0; p < ring; ++p) {
      for (std::int32_t l = 0; l < a; ++l) {
        if (kv_reads[static_cast<std::size_t>(l)] == 0) continue;  // it receives no kv
        const DeviceId device = layout.device(base, p, l);
        launch_seconds.assign(static_cast<std::size_t>(ring), 0.0);
        outer_seconds.assign(static_cast<std::size_t>(ring), 0.0);  // by its round's first launch
        for (std::int32_t start = 0; start < ring; ++start) {
          const TokenCount held = tokens[static_cast<std::size_t>(group * ring + start)];
          if (start == p || held == 0) continue;  // no kv travels from an empty position
          const std::int32_t t = layout.visit_index(start, p);
          const RingLayout::Hop hop = layout.hop(start, t);
          const DeviceId from = layout.device(base, hop.from, l);
          const int inter = shape.node_of(from) != shape.node_of(device) ? 1 : 0;
          const double bytes = static_cast<double>(value_bytes(header, SlotKind::kKV, held)) *
                               kv_reads[static_cast<std::size_t>(l)];
          const bool outer = layout.outer_hop(t);
          double& slowest =
              (outer ? outer_seconds : launch_seconds)[static_cast<std::size_t>(hop.launch)];
          const double wait =
              outer && layout.window > 1 ? std::min(latency[0], latency[1]) : latency[inter];
          slowest = std::max(slowest, setup + wait + bytes / rate[inter]);
        }
        double sum = 0;
        for (std::int32_t round = 0; round < ring; round += layout.window) {
          double inner = 0;
          for (std::int32_t k = round; k < std::min(ring, round + layout.window); ++k) {
            inner += launch_seconds[static_cast<std::size_t>(k)];
          }
          sum += std::max(inner, outer_seconds[static_cast<std::size_t>(round)]);
        }
        chain = std::max(chain, sum);
      }
    }
  }
  return std::max(mean_compute[0], chain) + std::max(mean_compute[1], chain);
}

}  // namespace dcp
