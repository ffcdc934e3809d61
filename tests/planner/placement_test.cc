// SPDX-License-Identifier: Apache-2.0
// Placements: every vertex placed once, both caps held, figures consistent, deterministic.
#include "dcp/planner/placement/placement.h"

#include <set>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

#include "dcp/model/mask_spec.h"

#include "dcp/planner/partition/partitioned_hypergraph.h"
#include "dcp/planner/placement/block_hypergraph.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/planner/placement/static_placements.h"

#include "tests/testing/mask_checks.h"

namespace dcp {
namespace {

// Every work unit runs on the device of its q block.
void expect_work_with_q(const Workload& workload, const Placement& placement) {
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    EXPECT_EQ(placement.work_unit_device[static_cast<std::size_t>(w)],
              placement.token_block_device[static_cast<std::size_t>(
                  workload.blocks().block_id(unit.seq, unit.q_block))])
        << "work unit " << w;
  }
}

Workload random_workload(Rng& rng) {
  std::vector<TokenCount> lengths;
  for (auto s = rng.uniform_int(1, 6); s > 0; --s) lengths.push_back(rng.uniform_int(1, 3000));
  const auto kind = all_mask_kinds()[static_cast<std::size_t>(rng.uniform_int(0, 5))];
  const MaskSpec spec = testing::random_spec(kind, lengths[0], rng);
  const SequenceBatch batch(lengths);
  AttentionShape shape;
  shape.q_heads = 4;
  shape.kv_heads = 2;
  return Workload(shape, batch, build_batch_mask(spec, batch), rng.uniform_int(64, 512),
                  static_cast<std::int32_t>(rng.uniform_int(1, 2)));
}

std::vector<VertexWeight> device_loads(const Workload& workload, const Placement& placement) {
  const BlockHypergraph bh = build_block_hypergraph(workload);
  std::vector<VertexWeight> loads(static_cast<std::size_t>(placement.cluster.devices()));
  for (BlockId b = 0; b < bh.token_blocks; ++b) {
    loads[static_cast<std::size_t>(placement.token_block_device[static_cast<std::size_t>(b)])] +=
        bh.graph.weight(b);
  }
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    loads[static_cast<std::size_t>(placement.work_unit_device[static_cast<std::size_t>(w)])] +=
        bh.graph.weight(bh.vertex_of_work_unit(w));
  }
  return loads;
}

TEST(HierarchicalPlacer, HoldsBothCapsAndConsistentFiguresOnRandomBatches) {
  Rng rng(31);
  const ClusterShape clusters[] = {{1, 1}, {1, 3}, {1, 6}, {2, 3}, {2, 4}, {3, 2}};
  for (int trial = 0; trial < 24; ++trial) {
    const Workload workload = random_workload(rng);
    PlacementOptions options;
    options.cluster = clusters[trial % 6];
    options.seed = static_cast<std::uint64_t>(trial);
    const PlacementResult result = place(workload, options);
    ASSERT_NO_THROW(validate(result.placement, workload));
    EXPECT_TRUE(result.within_bounds);
    const auto loads = device_loads(workload, result.placement);
    const BlockHypergraph bh = build_block_hypergraph(workload);
    const auto devices = options.cluster.devices();
    for (const VertexWeight& load : loads) {
      EXPECT_LE(load.compute, result.compute_bound);
      EXPECT_LE(load.memory, result.memory_bound);
    }
    // The memory bound is the epsilon bound unless indivisible blocks force the packing bound.
    const double eps_bound = 1.2 * static_cast<double>(bh.graph.total_weight().memory) / devices;
    if (!result.memory_bound_is_packing) {
      EXPECT_LE(result.memory_bound, eps_bound + 1);
    }

    // km1 = inter + intra over both passes = the partition's km1 from scratch.
    const PlacementMetrics metrics = evaluate(workload, result.placement);
    const std::int64_t forward = metrics.bytes_inter_node + metrics.bytes_intra_node;
    EXPECT_EQ(metrics.km1,
              forward + metrics.backward_bytes_inter_node + metrics.backward_bytes_intra_node);
    std::vector<PartId> parts(result.placement.token_block_device.begin(),
                              result.placement.token_block_device.end());
    parts.insert(parts.end(), result.placement.work_unit_device.begin(),
                 result.placement.work_unit_device.end());
    EXPECT_EQ(metrics.km1, PartitionedHypergraph(bh.graph, devices, parts).recompute_km1());
    std::int64_t in = 0, out = 0;
    for (const DeviceLoad& load : metrics.devices) {
      in += load.bytes_in;
      out += load.bytes_out;
    }
    EXPECT_EQ(in, out) << "every byte sent is received";
    EXPECT_EQ(in, forward);

    // Same seed, same placement.
    const PlacementResult again = place(workload, options);
    EXPECT_EQ(again.placement.token_block_device, result.placement.token_block_device);
    EXPECT_EQ(again.placement.work_unit_device, result.placement.work_unit_device);
  }
}

TEST(HierarchicalPlacer, HandlesOneDeviceOneTokenAndMoreDevicesThanBlocks) {
  const SequenceBatch one({1});
  const Workload tiny(AttentionShape{}, one, build_batch_mask(MaskSpec{}, one), 16, 1);
  for (const ClusterShape cluster : {ClusterShape{1, 1}, ClusterShape{2, 4}}) {
    PlacementOptions options;
    options.cluster = cluster;
    const PlacementResult result = place(tiny, options);
    EXPECT_TRUE(result.within_bounds);
    const PlacementMetrics metrics = evaluate(tiny, result.placement);
    EXPECT_EQ(metrics.devices_without_data, cluster.devices() - 1);
    EXPECT_TRUE(cluster.devices() == 1 || result.memory_bound_is_packing);
  }
  const SequenceBatch few({300, 200});
  const Workload small(AttentionShape{}, few, build_batch_mask(MaskSpec{}, few), 256, 1);
  PlacementOptions options;
  options.cluster = {1, 6};  // 3 token blocks on 6 devices
  const PlacementResult result = place(small, options);
  EXPECT_TRUE(result.within_bounds);
  EXPECT_GE(evaluate(small, result.placement).devices_without_data, 3);
}

TEST(HierarchicalPlacer, RejectsBadOptions) {
  const SequenceBatch batch({100});
  const Workload workload(AttentionShape{}, batch, build_batch_mask(MaskSpec{}, batch), 16, 1);
  PlacementOptions options;
  options.cluster = {0, 8};
  EXPECT_THROW(place(workload, options), InvalidInput);
  options.cluster = {1, 8};
  options.eps_compute = -0.1;
  EXPECT_THROW(place(workload, options), InvalidInput);
}

// Sequences that fit a device's share stay whole, largest first on the device with the fewest
// tokens; one too long for any device is cut at its blocks, within one node where that node has
// room; every work unit runs with its q block.
TEST(PackedPlacement, KeepsSequencesWholeWhereTheyFitAndCutOnlyTheLongOnes) {
  const SequenceBatch batch({1000, 300, 260, 200, 120, 100, 80, 40});  // 2100 tokens
  const Workload workload(AttentionShape{}, batch, build_batch_mask(MaskSpec{}, batch), 100, 1);
  const ClusterShape cluster{2, 2};  // a share of 525 tokens, at most 551 at eps 0.05
  const PackedPlacement packed = packed_placement(workload, cluster, 0.05);
  validate(packed.placement, workload);
  const BlockLayout& blocks = workload.blocks();
  std::vector<TokenCount> held(4, 0);
  std::vector<std::set<DeviceId>> devices_of(static_cast<std::size_t>(batch.size()));
  for (BlockId b = 0; b < blocks.block_count(); ++b) {
    const DeviceId d = packed.placement.token_block_device[static_cast<std::size_t>(b)];
    held[static_cast<std::size_t>(d)] += blocks.block(b).tokens;
    devices_of[static_cast<std::size_t>(blocks.block(b).seq)].insert(d);
  }
  // The 1000-token sequence is cut, over both devices of one node (10 blocks of 100).
  ASSERT_EQ(devices_of[0].size(), 2u);
  EXPECT_EQ(cluster.node_of(*devices_of[0].begin()), cluster.node_of(*devices_of[0].rbegin()));
  // Every other sequence is whole on one device.
  for (SeqIndex seq = 1; seq < batch.size(); ++seq)
    EXPECT_EQ(devices_of[static_cast<std::size_t>(seq)].size(), 1u) << seq;
  for (const TokenCount tokens : held) EXPECT_LE(tokens, 551);
  EXPECT_TRUE(packed.within_bounds);
  expect_work_with_q(workload, packed.placement);
  // No room within the bound for the blocks: over it, reported.
  const SequenceBatch one({1000});
  const Workload long_one(AttentionShape{}, one, build_batch_mask(MaskSpec{}, one), 1000, 1);
  EXPECT_FALSE(packed_placement(long_one, cluster, 0.05).within_bounds);
}

// After packing, a sequence whose blocks all lie on one device is cut again at the given size on
// that device; a sequence spread over devices keeps its blocks and their devices; every work unit
// runs with its q block.
TEST(WholeSequencesReblocked, RecutsOnlyTheSequencesWholeOnOneDevice) {
  const SequenceBatch batch({1000, 300, 260, 200, 120, 100, 80, 40});
  const Workload workload(AttentionShape{}, batch, build_batch_mask(MaskSpec{}, batch), 100, 1);
  const ClusterShape cluster{2, 2};
  const PackedPlacement packed = packed_placement(workload, cluster, 0.05);
  const ReblockedPlacement whole = whole_sequences_reblocked(workload, packed.placement, 400);
  validate(whole.placement, whole.workload);
  const BlockLayout& before = workload.blocks();
  const BlockLayout& after = whole.workload.blocks();
  // The 1000-token sequence is spread: its ten blocks of 100 where they were.
  ASSERT_EQ(after.blocks_in(0), 10);
  for (LocalBlockIndex b = 0; b < 10; ++b) {
    EXPECT_EQ(whole.placement.token_block_device[static_cast<std::size_t>(after.block_id(0, b))],
              packed.placement.token_block_device[static_cast<std::size_t>(before.block_id(0, b))]);
  }
  // The others are whole: one block of up to 400 tokens, on the device that held them.
  for (SeqIndex seq = 1; seq < batch.size(); ++seq) {
    EXPECT_EQ(after.blocks_in(seq), 1) << seq;
    EXPECT_EQ(after.block_size(seq), 400);
    EXPECT_EQ(
        whole.placement.token_block_device[static_cast<std::size_t>(after.block_id(seq, 0))],
        packed.placement.token_block_device[static_cast<std::size_t>(before.block_id(seq, 0))]);
  }
  expect_work_with_q(whole.workload, whole.placement);
  EXPECT_EQ(whole.workload.batch().total_tokens(), batch.total_tokens());
  EXPECT_THROW(whole_sequences_reblocked(workload, packed.placement, 0), InvalidInput);
}

TEST(ZigzagPlacement, PutsChunksRAndTwoPMinusOneMinusROnDeviceR) {
  const SequenceBatch batch({8 * 64});
  const Workload workload(AttentionShape{}, batch, build_batch_mask(MaskSpec{}, batch), 64, 1);
  const Placement placement = zigzag_block_placement(workload, {1, 4});
  // 8 blocks = 8 chunks of 64 tokens on 4 devices: 0 1 2 3 3 2 1 0.
  EXPECT_EQ(placement.token_block_device, (std::vector<DeviceId>{0, 1, 2, 3, 3, 2, 1, 0}));
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const WorkUnit unit = workload.work_unit(w);
    EXPECT_EQ(placement.work_unit_device[static_cast<std::size_t>(w)],
              placement.token_block_device[static_cast<std::size_t>(unit.q_block)]);
  }
  const PlacementMetrics metrics = evaluate(workload, placement);
  EXPECT_DOUBLE_EQ(metrics.imbalance_memory, 1.0);
  EXPECT_DOUBLE_EQ(metrics.imbalance_compute, 1.0) << "zigzag balances causal work exactly here";
}

TEST(ZigzagBaseline, CutsEverySequenceIntoTwoPChunksWhateverTheBlockSize) {
  // 4 devices, 8 chunks per sequence: 1000 tokens -> chunks of 125; 10 tokens -> chunks of 2 (the
  // last three chunks empty: 5 blocks); 3 tokens -> chunks of 1 (3 blocks).
  const SequenceBatch batch({1000, 10, 3});
  const Workload workload(AttentionShape{}, batch, build_batch_mask(MaskSpec{}, batch), 1024, 1);
  const ZigzagBaseline zigzag = zigzag_baseline(workload, {2, 2});
  const BlockLayout& blocks = zigzag.workload.blocks();
  ASSERT_EQ(blocks.block_count(), 8 + 5 + 3);
  EXPECT_EQ(blocks.block_size(0), 125);
  EXPECT_EQ(blocks.block_size(1), 2);
  EXPECT_EQ(blocks.block(blocks.block_id(1, 4)).tokens, 2);
  EXPECT_EQ(blocks.block_size(2), 1);
  EXPECT_EQ(zigzag.placement.token_block_device,
            (std::vector<DeviceId>{0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 0, 1, 2}));
  EXPECT_EQ(zigzag.workload.unmasked_pairs(), workload.unmasked_pairs());
  EXPECT_NO_THROW(validate(zigzag.placement, zigzag.workload));
  expect_work_with_q(zigzag.workload, zigzag.placement);
  // Every device holds tokens of the 1000-token sequence, so its kv chunks cross nodes: chunk 0
  // (device 0, node 0) is read by every later chunk, on both nodes.
  const PlacementMetrics metrics = evaluate(zigzag.workload, zigzag.placement);
  EXPECT_GT(metrics.bytes_inter_node, 0);
  EXPECT_EQ(metrics.devices_without_data, 0);
}

TEST(HeadGroups, JoinTheWorkUnitsOfOneTileThatReadTheSameKvHeads) {
  const SequenceBatch batch({300});
  AttentionShape shape;
  shape.q_heads = 8;
  shape.kv_heads = 2;
  const Workload workload(shape, batch, build_batch_mask(MaskSpec{}, batch), 100, 2);
  const std::vector<std::int64_t> groups = head_groups(workload);
  const BlockHypergraph hypergraph = build_block_hypergraph(workload);
  ASSERT_EQ(groups.size(), static_cast<std::size_t>(hypergraph.graph.vertex_count()));
  for (BlockId b = 0; b < workload.blocks().block_count(); ++b)
    EXPECT_EQ(groups[static_cast<std::size_t>(hypergraph.vertex_of_block(b))], -1);
  // Head blocks of 2 q heads, 4 q heads per kv head: head blocks {0, 1} read kv head 0.
  for (WorkUnitId a = 0; a < workload.work_unit_count(); ++a) {
    for (WorkUnitId b = 0; b < workload.work_unit_count(); ++b) {
      const WorkUnit x = workload.work_unit(a);
      const WorkUnit y = workload.work_unit(b);
      const bool alike = x.tile == y.tile && workload.heads().kv_block_of(x.head_block) ==
                                                 workload.heads().kv_block_of(y.head_block);
      EXPECT_EQ(groups[static_cast<std::size_t>(hypergraph.vertex_of_work_unit(a))] ==
                    groups[static_cast<std::size_t>(hypergraph.vertex_of_work_unit(b))],
                alike);
    }
  }
}

TEST(GreedyPlacement, BalancesMemoryLargestFirst) {
  const SequenceBatch batch({1000, 900, 100, 50});
  const Workload workload(AttentionShape{}, batch, build_batch_mask(MaskSpec{}, batch), 1024, 1);
  const Placement placement = greedy_placement(workload, {1, 2}, 0.1);
  // 1000 -> 0; 900 -> 1; 100 -> 1 (900 < 1000); 50 -> 0 (a tie at 1000 goes to the lower id).
  EXPECT_EQ(placement.token_block_device, (std::vector<DeviceId>{0, 1, 1, 0}));
}

}  // namespace
}  // namespace dcp
