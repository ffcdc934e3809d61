// SPDX-License-Identifier: Apache-2.0
// One coarsening step: cluster strongly connected vertices and contract the clusters.
#include "dcp/planner/partition/coarsening.h"

#include <algorithm>

namespace dcp {

std::optional<CoarseLevel> coarsen(const Hypergraph& graph, const CoarseningOptions& options,
                                   Rng& rng) {
  const VertexId n = graph.vertex_count();
  std::vector<VertexId> order(static_cast<std::size_t>(n));
  for (VertexId v = 0; v < n; ++v) order[static_cast<std::size_t>(v)] = v;
  rng.shuffle(order);

  // Step 1: clustering. cluster[v] is the representative vertex of v's cluster, or -1.
  std::vector<VertexId> cluster(static_cast<std::size_t>(n), -1);
  std::vector<VertexWeight> cluster_weight(static_cast<std::size_t>(n));
  std::vector<double> rating(static_cast<std::size_t>(n), 0.0);
  std::vector<VertexId> rated;
  VertexId clusters = n;
  for (const VertexId u : order) {
    if (cluster[static_cast<std::size_t>(u)] != -1) continue;
    rated.clear();
    for (const NetId e : graph.nets(u)) {
      const auto pins = graph.pins(e);
      if (pins.size() < 2 || pins.size() > static_cast<std::size_t>(options.max_rated_net_size))
        continue;
      const double score =
          static_cast<double>(graph.net_weight(e)) / static_cast<double>(pins.size() - 1);
      for (const VertexId x : pins) {
        if (x == u) continue;
        const VertexId c =
            cluster[static_cast<std::size_t>(x)] == -1 ? x : cluster[static_cast<std::size_t>(x)];
        if (rating[static_cast<std::size_t>(c)] == 0.0) rated.push_back(c);
        rating[static_cast<std::size_t>(c)] += score;
      }
    }
    VertexId best = -1;
    double best_rating = 0.0;
    const VertexWeight& wu = graph.weight(u);
    for (const VertexId c : rated) {
      const double r = rating[static_cast<std::size_t>(c)];
      rating[static_cast<std::size_t>(c)] = 0.0;
      if (options.community != nullptr && (*options.community)[static_cast<std::size_t>(c)] !=
                                              (*options.community)[static_cast<std::size_t>(u)]) {
        continue;
      }
      const VertexWeight& wc = cluster[static_cast<std::size_t>(c)] == -1
                                   ? graph.weight(c)
                                   : cluster_weight[static_cast<std::size_t>(c)];
      if (wc.compute + wu.compute > options.max_cluster_weight.compute ||
          wc.memory + wu.memory > options.max_cluster_weight.memory) {
        continue;
      }
      if (r > best_rating || (r == best_rating && best != -1 && c < best)) {
        best = c;
        best_rating = r;
      }
    }
    if (best == -1) continue;
    if (cluster[static_cast<std::size_t>(best)] == -1) {
      cluster[static_cast<std::size_t>(best)] = best;
      cluster_weight[static_cast<std::size_t>(best)] = graph.weight(best);
    }
    cluster[static_cast<std::size_t>(u)] = best;
    cluster_weight[static_cast<std::size_t>(best)] += wu;
    --clusters;
  }
  if (static_cast<double>(clusters) > 0.95 * static_cast<double>(n)) return std::nullopt;

  for (VertexId v = 0; v < n; ++v) {
    if (cluster[static_cast<std::size_t>(v)] == -1) cluster[static_cast<std::size_t>(v)] = v;
  }
  return contract(graph, cluster);
}

CoarseLevel contract(const Hypergraph& graph, const std::vector<VertexId>& representative) {
  const VertexId n = graph.vertex_count();
  // Step 1: number coarse vertices in order of their first fine vertex (deterministic).
  CoarseLevel level;
  level.coarse_of.assign(static_cast<std::size_t>(n), -1);
  std::vector<VertexId> id_of_rep(static_cast<std::size_t>(n), -1);
  Hypergraph::Builder builder;
  std::vector<VertexWeight> weights;
  for (VertexId v = 0; v < n; ++v) {
    const VertexId rep = representative[static_cast<std::size_t>(v)];
    VertexId& id = id_of_rep[static_cast<std::size_t>(rep)];
    if (id == -1) {
      id = static_cast<VertexId>(weights.size());
      weights.push_back({});
    }
    level.coarse_of[static_cast<std::size_t>(v)] = id;
    weights[static_cast<std::size_t>(id)] += graph.weight(v);
  }
  for (const VertexWeight& w : weights) builder.add_vertex(w);

  // Step 2: contract nets.
  std::vector<VertexId> pins;
  std::vector<char> seen(weights.size(), 0);
  for (NetId e = 0; e < graph.net_count(); ++e) {
    pins.clear();
    for (const VertexId v : graph.pins(e)) {
      const VertexId c = level.coarse_of[static_cast<std::size_t>(v)];
      if (!seen[static_cast<std::size_t>(c)]) {
        seen[static_cast<std::size_t>(c)] = 1;
        pins.push_back(c);
      }
    }
    for (const VertexId c : pins) seen[static_cast<std::size_t>(c)] = 0;
    if (pins.size() >= 2) builder.add_net(graph.net_weight(e), pins);
  }
  level.graph = std::move(builder).build();
  return level;
}

}  // namespace dcp
