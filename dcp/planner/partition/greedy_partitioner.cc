// SPDX-License-Identifier: Apache-2.0
// Greedy growing initial partitioner.
#include "dcp/planner/partition/greedy_partitioner.h"

#include <algorithm>

#include "dcp/planner/partition/balance.h"

namespace dcp {

std::vector<PartId> greedy_partition(const Hypergraph& graph, const PartitionRequest& request,
                                     Rng& rng) {
  const PartId k = request.parts;
  const VertexId n = graph.vertex_count();
  const auto kk = static_cast<std::size_t>(k);
  VertexWeight mean_cap;
  for (const VertexWeight& cap : request.max_part_weight) mean_cap += cap;
  mean_cap.compute /= k;
  mean_cap.memory /= k;

  std::vector<VertexId> order(static_cast<std::size_t>(n));
  for (VertexId v = 0; v < n; ++v) order[static_cast<std::size_t>(v)] = v;
  rng.shuffle(order);
  std::vector<double> size(static_cast<std::size_t>(n));
  for (VertexId v = 0; v < n; ++v)
    size[static_cast<std::size_t>(v)] = fill_ratio(graph.weight(v), mean_cap);
  std::stable_sort(order.begin(), order.end(), [&](VertexId a, VertexId b) {
    return size[static_cast<std::size_t>(a)] > size[static_cast<std::size_t>(b)];
  });

  std::vector<PartId> parts(static_cast<std::size_t>(n), 0);
  std::vector<VertexWeight> load(kk);
  std::vector<std::int32_t> pins_in(static_cast<std::size_t>(graph.net_count()) * kk, 0);
  std::vector<Weight> score(kk);
  for (const VertexId v : order) {
    std::fill(score.begin(), score.end(), 0);
    for (const NetId e : graph.nets(v)) {
      for (PartId p = 0; p < k; ++p) {
        if (pins_in[static_cast<std::size_t>(e) * kk + static_cast<std::size_t>(p)] > 0) {
          score[static_cast<std::size_t>(p)] += graph.net_weight(e);
        }
      }
    }
    const VertexWeight& w = graph.weight(v);
    PartId best = -1;
    double best_fill = 0;
    bool best_fits = false;
    for (PartId p = 0; p < k; ++p) {
      VertexWeight after = load[static_cast<std::size_t>(p)];
      after += w;
      const VertexWeight& cap = request.max_part_weight[static_cast<std::size_t>(p)];
      const bool ok = within(after, cap);
      const double f = fill_ratio(after, cap);
      bool better = false;
      if (best == -1 || ok != best_fits) {
        better = best == -1 || ok;
      } else if (ok) {
        better = score[static_cast<std::size_t>(p)] > score[static_cast<std::size_t>(best)] ||
                 (score[static_cast<std::size_t>(p)] == score[static_cast<std::size_t>(best)] &&
                  f < best_fill);
      } else {
        better = f < best_fill;
      }
      if (better) {
        best = p;
        best_fill = f;
        best_fits = ok;
      }
    }
    parts[static_cast<std::size_t>(v)] = best;
    load[static_cast<std::size_t>(best)] += w;
    for (const NetId e : graph.nets(v))
      ++pins_in[static_cast<std::size_t>(e) * kk + static_cast<std::size_t>(best)];
  }
  return parts;
}

std::vector<PartId> GreedyPartitioner::partition(const Hypergraph& graph,
                                                 const PartitionRequest& request) const {
  Rng rng(request.seed);
  return greedy_partition(graph, request, rng);
}

}  // namespace dcp
