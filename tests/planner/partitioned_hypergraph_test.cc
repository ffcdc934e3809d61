// SPDX-License-Identifier: Apache-2.0
// The incremental km1 and gain cache equal a from-scratch recomputation after any moves.
#include "dcp/planner/partition/partitioned_hypergraph.h"

#include <gtest/gtest.h>

#include "dcp/core/rng.h"

namespace dcp {
namespace {

Hypergraph random_hypergraph(Rng& rng, VertexId n, NetId m) {
  Hypergraph::Builder builder;
  for (VertexId v = 0; v < n; ++v)
    builder.add_vertex({rng.uniform_int(0, 5), rng.uniform_int(0, 5)});
  std::vector<VertexId> pins;
  for (NetId e = 0; e < m; ++e) {
    pins.clear();
    const auto size = rng.uniform_int(1, std::min<std::int64_t>(n, 8));
    while (static_cast<std::int64_t>(pins.size()) < size) {
      const auto v = static_cast<VertexId>(rng.uniform_int(0, n - 1));
      if (std::find(pins.begin(), pins.end(), v) == pins.end()) pins.push_back(v);
    }
    builder.add_net(rng.uniform_int(1, 100), pins);
  }
  return std::move(builder).build();
}

// A random hypergraph of 2..max_vertices vertices and 1..max_nets nets, in 2..max_k parts.
struct RandomPartition {
  PartId k;
  Hypergraph graph;
  std::vector<PartId> parts;
};
RandomPartition random_partition(Rng& rng, PartId max_k, VertexId max_vertices, NetId max_nets) {
  RandomPartition random;
  random.k = static_cast<PartId>(rng.uniform_int(2, max_k));
  random.graph = random_hypergraph(rng, static_cast<VertexId>(rng.uniform_int(2, max_vertices)),
                                   static_cast<NetId>(rng.uniform_int(1, max_nets)));
  random.parts.resize(static_cast<std::size_t>(random.graph.vertex_count()));
  for (auto& p : random.parts) p = static_cast<PartId>(rng.uniform_int(0, random.k - 1));
  return random;
}

// A random part of k other than `from`.
PartId another_part(Rng& rng, PartId k, PartId from) {
  auto to = static_cast<PartId>(rng.uniform_int(0, k - 2));
  return to >= from ? to + 1 : to;
}

TEST(AGainCache, EqualsRecomputationAfterRandomMoves) {
  Rng rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const auto [k, graph, parts] = random_partition(rng, 6, 60, 80);
    PartitionedHypergraph partition(graph, k, parts);
    for (int move = 0; move < 200; ++move) {
      const auto v = static_cast<VertexId>(rng.uniform_int(0, graph.vertex_count() - 1));
      const PartId to = another_part(rng, k, partition.part(v));
      const Weight predicted = partition.gain(v, to);
      const Weight before = partition.km1();
      partition.move(v, to);
      ASSERT_EQ(before - partition.km1(), predicted) << "the gain predicts the km1 change";
      ASSERT_EQ(partition.km1(), partition.recompute_km1());
    }
    for (VertexId v = 0; v < graph.vertex_count(); ++v) {
      for (PartId p = 0; p < k; ++p) {
        if (p != partition.part(v)) {
          ASSERT_EQ(partition.gain(v, p), partition.recompute_gain(v, p));
        }
      }
    }
    VertexWeight sum;
    for (PartId p = 0; p < k; ++p) sum += partition.part_weight(p);
    EXPECT_EQ(sum, graph.total_weight());
  }
}

TEST(APartitionedHypergraph, ReportsTouchedVerticesWhoseGainsChanged) {
  Rng rng(5);
  const Hypergraph graph = random_hypergraph(rng, 30, 40);
  std::vector<PartId> parts(30);
  for (auto& p : parts) p = static_cast<PartId>(rng.uniform_int(0, 2));
  PartitionedHypergraph partition(graph, 3, parts);
  for (int move = 0; move < 50; ++move) {
    std::vector<std::vector<Weight>> before(30, std::vector<Weight>(3));
    for (VertexId v = 0; v < 30; ++v) {
      for (PartId p = 0; p < 3; ++p)
        before[static_cast<std::size_t>(v)][static_cast<std::size_t>(p)] = partition.gain(v, p);
    }
    const auto v = static_cast<VertexId>(rng.uniform_int(0, 29));
    const PartId to = (partition.part(v) + 1) % 3;
    std::vector<VertexId> touched;
    partition.move(v, to, &touched);
    for (VertexId u = 0; u < 30; ++u) {
      bool changed = false;
      for (PartId p = 0; p < 3; ++p)
        changed |= partition.gain(u, p) !=
                   before[static_cast<std::size_t>(u)][static_cast<std::size_t>(p)];
      if (changed) {
        EXPECT_NE(std::find(touched.begin(), touched.end(), u), touched.end()) << "vertex " << u;
      }
    }
  }
}

TEST(APartitionedHypergraph, WithoutTheConnCacheGivesTheSameGainsAndTouchedVertices) {
  Rng rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    const auto [k, graph, parts] = random_partition(rng, 9, 50, 70);
    PartitionedHypergraph cached(graph, k, parts);
    PartitionedHypergraph uncached(graph, k, parts, 0);
    for (int move = 0; move < 100; ++move) {
      for (VertexId v = 0; v < graph.vertex_count(); ++v) {
        ASSERT_EQ(cached.benefit(v), uncached.benefit(v));
        for (PartId p = 0; p < k; ++p) ASSERT_EQ(cached.gain(v, p), uncached.gain(v, p));
      }
      const auto v = static_cast<VertexId>(rng.uniform_int(0, graph.vertex_count() - 1));
      const PartId to = another_part(rng, k, cached.part(v));
      std::vector<VertexId> touched_cached, touched_uncached;
      cached.move(v, to, &touched_cached);
      uncached.move(v, to, &touched_uncached);
      ASSERT_EQ(touched_cached, touched_uncached);
      ASSERT_EQ(cached.km1(), uncached.km1());
    }
  }
}

}  // namespace
}  // namespace dcp
