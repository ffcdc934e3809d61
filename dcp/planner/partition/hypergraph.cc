// SPDX-License-Identifier: Apache-2.0
// A hypergraph with two vertex weights and weighted nets, in compressed form.
#include "dcp/planner/partition/hypergraph.h"

#include <cassert>

namespace dcp {

VertexId Hypergraph::Builder::add_vertex(VertexWeight weight) {
  vertex_weights_.push_back(weight);
  return static_cast<VertexId>(vertex_weights_.size() - 1);
}

NetId Hypergraph::Builder::add_net(Weight weight, std::span<const VertexId> pins) {
  for ([[maybe_unused]] const VertexId v : pins) {
    assert(v >= 0 && static_cast<std::size_t>(v) < vertex_weights_.size());
  }
  net_weights_.push_back(weight);
  pins_.insert(pins_.end(), pins.begin(), pins.end());
  net_offsets_.push_back(static_cast<std::int64_t>(pins_.size()));
  return static_cast<NetId>(net_weights_.size() - 1);
}

Hypergraph Hypergraph::Builder::build() && {
  Hypergraph h;
  h.vertex_weights_ = std::move(vertex_weights_);
  h.net_weights_ = std::move(net_weights_);
  h.net_offsets_ = std::move(net_offsets_);
  h.pins_ = std::move(pins_);
  // Incidence lists by counting sort: nets of a vertex come out in increasing net order.
  const std::size_t n = h.vertex_weights_.size();
  h.incident_offsets_.assign(n + 1, 0);
  for (const VertexId v : h.pins_) ++h.incident_offsets_[static_cast<std::size_t>(v) + 1];
  for (std::size_t v = 0; v < n; ++v) h.incident_offsets_[v + 1] += h.incident_offsets_[v];
  h.incident_.resize(h.pins_.size());
  std::vector<std::int64_t> fill(h.incident_offsets_.begin(), h.incident_offsets_.end() - 1);
  for (NetId e = 0; e < h.net_count(); ++e) {
    for (const VertexId v : h.pins(e))
      h.incident_[static_cast<std::size_t>(fill[static_cast<std::size_t>(v)]++)] = e;
  }
  for (const VertexWeight& w : h.vertex_weights_) h.total_ += w;
  return h;
}

}  // namespace dcp
