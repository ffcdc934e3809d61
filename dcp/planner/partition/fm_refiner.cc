// SPDX-License-Identifier: Apache-2.0
// k-way FM refinement with a gain cache.
#include "dcp/planner/partition/fm_refiner.h"

#include <queue>
#include <tuple>

#include "dcp/planner/partition/balance.h"
#include "dcp/planner/partition/partitioner.h"

namespace dcp {

std::pair<PartId, Weight> best_move(const PartitionedHypergraph& partition, VertexId v,
                                    const std::vector<VertexWeight>& caps) {
  const VertexWeight& w = partition.graph().weight(v);
  PartId best = -1;
  Weight best_gain = 0;
  double best_fill = 0;
  for (PartId p = 0; p < partition.k(); ++p) {
    if (p == partition.part(v)) continue;
    const Weight g = partition.gain(v, p);
    if (best != -1 && g < best_gain) continue;  // cannot win: skip the cap and fill ratio
    const VertexWeight& cap = caps[static_cast<std::size_t>(p)];
    if (!fits(partition.part_weight(p), w, cap)) continue;
    VertexWeight after = partition.part_weight(p);
    after += w;
    const double f = fill_ratio(after, cap);
    if (best == -1 || g > best_gain || (g == best_gain && f < best_fill)) {
      best = p;
      best_gain = g;
      best_fill = f;
    }
  }
  return {best, best_gain};
}

Weight fm_refine(PartitionedHypergraph& partition, const std::vector<VertexWeight>& caps,
                 const FmOptions& options) {
  const Hypergraph& graph = partition.graph();
  const Weight start_km1 = partition.km1();
  // (gain, -vertex) so that ties pop the lower vertex id first: deterministic.
  using Entry = std::tuple<Weight, VertexId, PartId, std::uint32_t>;
  std::vector<std::uint32_t> version(static_cast<std::size_t>(graph.vertex_count()), 0);
  std::vector<char> locked(static_cast<std::size_t>(graph.vertex_count()), 0);
  std::vector<std::pair<VertexId, PartId>> moves;  // (vertex, part it came from)
  std::vector<VertexId> touched;
  // The move that last re-keyed each vertex: a vertex sharing several nets with the moved one is
  // touched once per net, and re-keying it once gives the same queue.
  std::vector<std::int64_t> rekeyed(static_cast<std::size_t>(graph.vertex_count()), -1);
  std::int64_t move_count = 0;

  for (std::int32_t pass = 0; pass < options.max_passes; ++pass) {
    const Weight pass_start = partition.km1();
    std::priority_queue<Entry> queue;
    const auto push = [&](VertexId v) {
      const auto [to, gain] = best_move(partition, v, caps);
      ++version[static_cast<std::size_t>(v)];
      if (to >= 0) queue.emplace(gain, -v, to, version[static_cast<std::size_t>(v)]);
    };
    for (VertexId v = 0; v < graph.vertex_count(); ++v) {
      if (partition.is_boundary(v)) push(v);
    }
    moves.clear();
    Weight best_km1 = partition.km1();
    std::size_t best_prefix = 0;
    std::int32_t since_best = 0;
    while (!queue.empty() && since_best < options.max_moves_without_improvement) {
      [[maybe_unused]] const auto [gain_when_queued, neg_v, to, ver] = queue.top();
      queue.pop();
      const VertexId v = -neg_v;
      if (locked[static_cast<std::size_t>(v)] || ver != version[static_cast<std::size_t>(v)])
        continue;
      // The entry is current (every cache change re-keys the vertex), but caps may have filled.
      if (!fits(partition.part_weight(to), graph.weight(v), caps[static_cast<std::size_t>(to)])) {
        push(v);
        continue;
      }
      const PartId from = partition.part(v);
      touched.clear();
      partition.move(v, to, &touched);
      locked[static_cast<std::size_t>(v)] = 1;
      moves.emplace_back(v, from);
      if (partition.km1() < best_km1) {
        best_km1 = partition.km1();
        best_prefix = moves.size();
        since_best = 0;
      } else {
        ++since_best;
      }
      ++move_count;
      for (const VertexId u : touched) {
        auto& last = rekeyed[static_cast<std::size_t>(u)];
        if (locked[static_cast<std::size_t>(u)] || last == move_count) continue;
        last = move_count;
        push(u);
      }
    }
    // Roll back past the best prefix, newest first.
    for (std::size_t i = moves.size(); i > best_prefix; --i) {
      partition.move(moves[i - 1].first, moves[i - 1].second);
    }
    for (const auto& [v, from] : moves) locked[static_cast<std::size_t>(v)] = 0;
    if (partition.km1() >= pass_start) break;
  }
  return start_km1 - partition.km1();
}

}  // namespace dcp
