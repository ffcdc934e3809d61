// SPDX-License-Identifier: Apache-2.0
// Partitioners respect both caps, find known optima on small instances and are deterministic.
#include "dcp/planner/partition/partitioner.h"

#include <gtest/gtest.h>

#include "dcp/core/rng.h"

#include "dcp/planner/partition/coarsening.h"
#include "dcp/planner/partition/fm_refiner.h"
#include "dcp/planner/partition/multilevel_partitioner.h"
#include "dcp/planner/partition/partitioned_hypergraph.h"
#include "dcp/planner/partition/rebalancer.h"

namespace dcp {
namespace {

std::vector<VertexWeight> caps_for(const Hypergraph& graph, PartId k, double eps) {
  const VertexWeight& total = graph.total_weight();
  return std::vector<VertexWeight>(
      static_cast<std::size_t>(k),
      VertexWeight{static_cast<Weight>(static_cast<double>(total.compute) * (1 + eps) / k),
                   static_cast<Weight>(static_cast<double>(total.memory) * (1 + eps) / k)});
}

//   0 - 1 - 2 - 3        two 4-cliques joined by one light net (3, 4):
//   |   |   |   |        the optimum cuts only that net, km1 = 1.
//   4 - 5 - 6 - 7
// Vertices 0..3 form one group, 4..7 the other, by heavy nets.
Hypergraph two_groups() {
  Hypergraph::Builder builder;
  for (int v = 0; v < 8; ++v) builder.add_vertex({1, 1});
  const VertexId a[] = {0, 1, 2, 3};
  const VertexId b[] = {4, 5, 6, 7};
  builder.add_net(10, a);
  builder.add_net(10, b);
  const VertexId bridge[] = {3, 4};
  builder.add_net(1, bridge);
  return std::move(builder).build();
}

class EveryPartitioner : public ::testing::TestWithParam<PartitionerKind> {};

TEST_P(EveryPartitioner, FindsTheOptimumOfTwoHeavyGroups) {
  const Hypergraph graph = two_groups();
  PartitionRequest request;
  request.parts = 2;
  request.max_part_weight = caps_for(graph, 2, 0.0);
  const auto parts = create_partitioner(GetParam())->partition(graph, request);
  PartitionedHypergraph partition(graph, 2, parts);
  EXPECT_EQ(partition.km1(), 1);
  EXPECT_EQ(partition.part_weight(0), (VertexWeight{4, 4}));
}

TEST_P(EveryPartitioner, RespectsBothCapsAndIsDeterministicOnRandomHypergraphs) {
  Rng rng(21);
  for (int trial = 0; trial < 20; ++trial) {
    Hypergraph::Builder builder;
    const auto n = static_cast<VertexId>(rng.uniform_int(20, 400));
    // Memory vertices (few, heavy) and compute vertices (many, light), as in the block model.
    for (VertexId v = 0; v < n; ++v) {
      builder.add_vertex(v % 10 == 0 ? VertexWeight{0, rng.uniform_int(50, 100)}
                                     : VertexWeight{rng.uniform_int(1, 10), 0});
    }
    std::vector<VertexId> pins;
    for (VertexId v = 0; v < n; v += 10) {
      pins.assign(1, v);
      for (int j = 0; j < 6; ++j) pins.push_back(static_cast<VertexId>(rng.uniform_int(0, n - 1)));
      std::sort(pins.begin(), pins.end());
      pins.erase(std::unique(pins.begin(), pins.end()), pins.end());
      builder.add_net(rng.uniform_int(1, 50), pins);
    }
    const Hypergraph graph = std::move(builder).build();
    for (const PartId k : {1, 2, 3, 6}) {
      PartitionRequest request;
      request.parts = k;
      request.seed = static_cast<std::uint64_t>(trial);
      if (trial % 2 == 1) {  // groups of three compute vertices, as head groups are
        for (VertexId v = 0; v < n; ++v) request.groups.push_back(v % 10 == 0 ? -1 : v / 3);
      }
      request.max_part_weight = caps_for(graph, k, 0.5);
      // Memory comes in indivisible pieces: allow the heaviest one on top of the share.
      for (auto& cap : request.max_part_weight) cap.memory += 100;
      const auto partitioner = create_partitioner(GetParam());
      const auto parts = partitioner->partition(graph, request);
      ASSERT_EQ(parts.size(), static_cast<std::size_t>(n));
      PartitionedHypergraph partition(graph, k, parts);
      for (PartId p = 0; p < k; ++p) {
        EXPECT_LE(partition.part_weight(p).compute, request.max_part_weight[0].compute)
            << "k=" << k;
        EXPECT_LE(partition.part_weight(p).memory, request.max_part_weight[0].memory) << "k=" << k;
      }
      EXPECT_EQ(partitioner->partition(graph, request), parts) << "same seed, same partition";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Partitioners, EveryPartitioner,
                         ::testing::Values(PartitionerKind::kMultilevel, PartitionerKind::kGreedy),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(FmRefiner, RepairsSwappedVerticesWithinOneVertexOfSlack) {
  const Hypergraph graph = two_groups();
  // Vertices 3 and 7 swapped: both heavy nets cut (km1 20). Fixing it takes two moves in a row,
  // the first of which only fits with one vertex of slack (FM moves, it does not swap).
  PartitionedHypergraph partition(graph, 2, {0, 0, 0, 1, 1, 1, 1, 0});
  ASSERT_EQ(partition.km1(), 20);
  const auto caps = caps_for(graph, 2, 0.25);
  EXPECT_EQ(fm_refine(partition, caps, FmOptions{}), 19);
  EXPECT_EQ(partition.km1(), 1);
  EXPECT_LE(partition.part_weight(0).compute, caps[0].compute);
  EXPECT_LE(partition.part_weight(1).compute, caps[1].compute);
}

// Memory comes in indivisible blocks: part 0 holds three blocks of 4 against a cap of 10, and no
// block of 4 fits anywhere whole (parts 1 and 2 hold 8). Moving vertices out cannot repair it;
// swapping a 4 with a 2 of part 2 can, and the swap chosen is the one that cuts fewest nets.
TEST(Rebalancer, SwapsABlockForASmallerOneWhereNoBlockFitsElsewhereWhole) {
  Hypergraph::Builder builder;
  for (const Weight memory : {4, 4, 4, 4, 4, 4, 2, 2}) builder.add_vertex({0, memory});
  builder.add_net(5, std::vector<VertexId>{2, 7});  // vertex 2 belongs with vertex 7
  builder.add_net(1, std::vector<VertexId>{0, 1});
  builder.add_net(1, std::vector<VertexId>{3, 4});
  const Hypergraph graph = std::move(builder).build();
  PartitionedHypergraph partition(graph, 3, {0, 0, 0, 1, 1, 2, 2, 2});
  const std::vector<VertexWeight> caps(3, VertexWeight{100, 10});
  EXPECT_FALSE(rebalance(partition, caps));
  EXPECT_EQ(partition.part_weight(0).memory, 12) << "no single move fits";
  EXPECT_TRUE(swap_rebalance(partition, caps));
  for (PartId p = 0; p < 3; ++p) EXPECT_LE(partition.part_weight(p).memory, 10) << p;
  // Vertex 2 went to part 2, beside vertex 7 (the heavy net is no longer cut), for vertex 6.
  EXPECT_EQ(partition.part(2), 2);
  EXPECT_EQ(partition.part(6), 0);
  EXPECT_EQ(partition.part(7), 2);
  EXPECT_EQ(partition.km1(), partition.recompute_km1());
}

TEST(FmRefiner, NeverWorsensKm1NorBreaksACapOnRandomStarts) {
  Rng rng(8);
  const Hypergraph graph = two_groups();
  const auto caps = caps_for(graph, 2, 0.25);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<PartId> parts(8);
    VertexWeight load0;
    for (VertexId v = 0; v < 8; ++v) {
      parts[static_cast<std::size_t>(v)] = static_cast<PartId>(rng.uniform_int(0, 1));
      if (parts[static_cast<std::size_t>(v)] == 0) load0 += graph.weight(v);
    }
    if (load0.compute > 5 || load0.compute < 3) continue;  // start within the caps
    PartitionedHypergraph partition(graph, 2, parts);
    const Weight before = partition.km1();
    fm_refine(partition, caps, FmOptions{});
    EXPECT_LE(partition.km1(), before);
    EXPECT_EQ(partition.km1(), partition.recompute_km1());
    EXPECT_LE(partition.part_weight(0).compute, 5);
    EXPECT_LE(partition.part_weight(1).compute, 5);
  }
}

TEST(Coarsening, ContractSumsWeightsAndKeepsOnlyNetsThatStillJoinTwoClusters) {
  const Hypergraph graph = two_groups();
  // {0, 1, 2, 3} -> one cluster; 4 and 5 together; 6 and 7 alone.
  const CoarseLevel level = contract(graph, {0, 0, 0, 0, 4, 4, 6, 7});
  ASSERT_EQ(level.graph.vertex_count(), 4);
  EXPECT_EQ(level.coarse_of, (std::vector<VertexId>{0, 0, 0, 0, 1, 1, 2, 3}));
  EXPECT_EQ(level.graph.weight(0), (VertexWeight{4, 4}));
  EXPECT_EQ(level.graph.weight(1), (VertexWeight{2, 2}));
  // Net a lies inside cluster 0 and is dropped; b becomes {1, 2, 3}; the bridge {0, 1}.
  ASSERT_EQ(level.graph.net_count(), 2);
  EXPECT_EQ(level.graph.total_weight(), graph.total_weight());
  const std::vector<VertexId> b(level.graph.pins(0).begin(), level.graph.pins(0).end());
  EXPECT_EQ(b, (std::vector<VertexId>{1, 2, 3}));
  EXPECT_EQ(level.graph.net_weight(1), 1);
}

TEST(MultilevelPartitioner, StartsFromGroupsButStillFindsTheOptimum) {
  const Hypergraph graph = two_groups();
  PartitionRequest request;
  request.parts = 2;
  request.max_part_weight = caps_for(graph, 2, 0.25);  // one vertex of slack: FM moves, no swaps
  // A misleading grouping across the optimum's cut: refinement must split it.
  request.groups = {-1, -1, -1, 7, 7, -1, -1, -1};
  const auto parts = MultilevelPartitioner().partition(graph, request);
  EXPECT_EQ(PartitionedHypergraph(graph, 2, parts).km1(), 1);
}

TEST(MultilevelPartitioner, IsNoWorseThanTheHintItIsGiven) {
  const Hypergraph graph = two_groups();
  PartitionRequest request;
  request.parts = 2;
  request.max_part_weight = caps_for(graph, 2, 0.0);
  request.hint = {0, 0, 0, 0, 1, 1, 1, 1};
  const auto parts = MultilevelPartitioner().partition(graph, request);
  EXPECT_EQ(PartitionedHypergraph(graph, 2, parts).km1(), 1);
}

}  // namespace
}  // namespace dcp
