// SPDX-License-Identifier: Apache-2.0
// A hypergraph with two vertex weights (compute, memory) and weighted nets, in compressed form.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcp/core/ids.h"

namespace dcp {

// The two balance dimensions every vertex carries.
struct VertexWeight {
  Weight compute = 0;
  Weight memory = 0;

  VertexWeight& operator+=(const VertexWeight& o) {
    compute += o.compute;
    memory += o.memory;
    return *this;
  }
  VertexWeight& operator-=(const VertexWeight& o) {
    compute -= o.compute;
    memory -= o.memory;
    return *this;
  }
  friend bool operator==(const VertexWeight&, const VertexWeight&) = default;
};

// Immutable once built. Pins of a net are distinct vertices; nets with fewer than two pins may
// exist (they never count towards connectivity - 1).
class Hypergraph {
 public:
  class Builder {
   public:
    VertexId add_vertex(VertexWeight weight);
    // Pins must be distinct vertices already added.
    NetId add_net(Weight weight, std::span<const VertexId> pins);
    Hypergraph build() &&;

   private:
    std::vector<VertexWeight> vertex_weights_;
    std::vector<Weight> net_weights_;
    std::vector<std::int64_t> net_offsets_{0};
    std::vector<VertexId> pins_;
  };

  VertexId vertex_count() const { return static_cast<VertexId>(vertex_weights_.size()); }
  NetId net_count() const { return static_cast<NetId>(net_weights_.size()); }
  std::int64_t pin_count() const { return static_cast<std::int64_t>(pins_.size()); }

  const VertexWeight& weight(VertexId v) const {
    return vertex_weights_[static_cast<std::size_t>(v)];
  }
  Weight net_weight(NetId e) const { return net_weights_[static_cast<std::size_t>(e)]; }
  std::span<const VertexId> pins(NetId e) const {
    const auto b = static_cast<std::size_t>(net_offsets_[static_cast<std::size_t>(e)]);
    const auto n = static_cast<std::size_t>(net_offsets_[static_cast<std::size_t>(e) + 1]) - b;
    return std::span<const VertexId>(pins_).subspan(b, n);
  }
  std::span<const NetId> nets(VertexId v) const {
    const auto b = static_cast<std::size_t>(incident_offsets_[static_cast<std::size_t>(v)]);
    const auto n = static_cast<std::size_t>(incident_offsets_[static_cast<std::size_t>(v) + 1]) - b;
    return std::span<const NetId>(incident_).subspan(b, n);
  }
  const VertexWeight& total_weight() const { return total_; }

 private:
  std::vector<VertexWeight> vertex_weights_;
  std::vector<Weight> net_weights_;
  std::vector<std::int64_t> net_offsets_;
  std::vector<VertexId> pins_;
  std::vector<std::int64_t> incident_offsets_;
  std::vector<NetId> incident_;
  VertexWeight total_;
};

}  // namespace dcp
