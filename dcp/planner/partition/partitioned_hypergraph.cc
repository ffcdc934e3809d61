// SPDX-License-Identifier: Apache-2.0
// A k-way partition of a hypergraph with incrementally maintained km1 and gain cache.
#include "dcp/planner/partition/partitioned_hypergraph.h"

#include <cassert>

namespace dcp {

PartitionedHypergraph::PartitionedHypergraph(const Hypergraph& graph, PartId k,
                                             std::vector<PartId> parts, std::size_t max_conn_words)
    : graph_(&graph), k_(k), parts_(std::move(parts)) {
  const auto n = static_cast<std::size_t>(graph.vertex_count());
  const auto m = static_cast<std::size_t>(graph.net_count());
  const auto kk = static_cast<std::size_t>(k);
  assert(parts_.size() == n);
  part_weights_.assign(kk, {});
  pin_counts_.assign(m * kk, 0);
  connectivity_.assign(m, 0);
  benefit_.assign(n, 0);
  incident_weight_.assign(n, 0);
  const bool cached = n * kk <= max_conn_words;
  if (cached) conn_.assign(n * kk, 0);
  for (VertexId v = 0; v < graph.vertex_count(); ++v) {
    assert(part(v) >= 0 && part(v) < k);
    part_weights_[static_cast<std::size_t>(part(v))] += graph.weight(v);
  }
  for (NetId e = 0; e < graph.net_count(); ++e) {
    for (const VertexId v : graph.pins(e)) {
      if (pins_in(e, part(v))++ == 0) ++connectivity_[static_cast<std::size_t>(e)];
    }
    km1_ += graph.net_weight(e) * (connectivity_[static_cast<std::size_t>(e)] - 1);
  }
  // conn(v, p) for each net's pins over the parts the net connects only (most nets connect one or
  // two of the k); without the cache, no part.
  std::vector<PartId> net_parts;
  for (NetId e = 0; e < graph.net_count(); ++e) {
    const Weight w = graph.net_weight(e);
    net_parts.clear();
    if (cached) {
      for (PartId p = 0; p < k; ++p) {
        if (pin_count(e, p) > 0) net_parts.push_back(p);
      }
    }
    for (const VertexId v : graph.pins(e)) {
      incident_weight_[static_cast<std::size_t>(v)] += w;
      if (pin_count(e, part(v)) == 1) benefit_[static_cast<std::size_t>(v)] += w;
      for (const PartId p : net_parts) conn(v, p) += w;
    }
  }
}

Weight PartitionedHypergraph::conn_from_pins(VertexId v, PartId p) const {
  Weight conn = 0;
  for (const NetId e : graph_->nets(v)) {
    if (pin_count(e, p) > 0) conn += graph_->net_weight(e);
  }
  return conn;
}

bool PartitionedHypergraph::is_boundary(VertexId v) const {
  for (const NetId e : graph_->nets(v)) {
    if (connectivity(e) > 1) return true;
  }
  return false;
}

void PartitionedHypergraph::move(VertexId v, PartId to, std::vector<VertexId>* touched) {
  const PartId from = part(v);
  assert(from != to);
  const Hypergraph& g = *graph_;
  parts_[static_cast<std::size_t>(v)] = to;
  part_weights_[static_cast<std::size_t>(from)] -= g.weight(v);
  part_weights_[static_cast<std::size_t>(to)] += g.weight(v);
  Weight own_benefit = 0;
  if (touched != nullptr) touched->push_back(v);
  for (const NetId e : g.nets(v)) {
    const Weight w = g.net_weight(e);
    const std::int32_t left_in_from = --pins_in(e, from);
    const std::int32_t now_in_to = ++pins_in(e, to);
    if (now_in_to == 1) own_benefit += w;
    // Step 1: connectivity and km1.
    if (left_in_from == 0) {
      --connectivity_[static_cast<std::size_t>(e)];
      km1_ -= w;
    }
    if (now_in_to == 1) {
      ++connectivity_[static_cast<std::size_t>(e)];
      km1_ += w;
    }
    // Step 2: the cache entries of other pins that this net's new counts change.
    if (left_in_from > 1 && now_in_to > 2) continue;
    for (const VertexId u : g.pins(e)) {
      bool changed = false;
      if (left_in_from == 0) {
        if (!conn_.empty()) conn(u, from) -= w;
        changed = true;
      }
      if (now_in_to == 1) {
        if (!conn_.empty()) conn(u, to) += w;
        changed = true;
      }
      if (u != v) {
        const PartId pu = part(u);
        if (left_in_from == 1 && pu == from) {  // u is now alone in `from`
          benefit_[static_cast<std::size_t>(u)] += w;
          changed = true;
        }
        if (now_in_to == 2 && pu == to) {  // u is no longer alone in `to`
          benefit_[static_cast<std::size_t>(u)] -= w;
          changed = true;
        }
      }
      if (changed && touched != nullptr && u != v) touched->push_back(u);
    }
  }
  benefit_[static_cast<std::size_t>(v)] = own_benefit;
}

Weight PartitionedHypergraph::recompute_km1() const {
  Weight total = 0;
  std::vector<char> seen(static_cast<std::size_t>(k_));
  for (NetId e = 0; e < graph_->net_count(); ++e) {
    std::fill(seen.begin(), seen.end(), 0);
    std::int32_t lambda = 0;
    for (const VertexId v : graph_->pins(e)) {
      if (!seen[static_cast<std::size_t>(part(v))]) {
        seen[static_cast<std::size_t>(part(v))] = 1;
        ++lambda;
      }
    }
    total += graph_->net_weight(e) * (lambda - 1);
  }
  return total;
}

Weight PartitionedHypergraph::recompute_gain(VertexId v, PartId to) const {
  Weight gain = 0;
  for (const NetId e : graph_->nets(v)) {
    std::int32_t in_from = 0, in_to = 0;
    for (const VertexId u : graph_->pins(e)) {
      in_from += part(u) == part(v) ? 1 : 0;
      in_to += part(u) == to ? 1 : 0;
    }
    if (in_from == 1) gain += graph_->net_weight(e);
    if (in_to == 0) gain -= graph_->net_weight(e);
  }
  return gain;
}

}  // namespace dcp
