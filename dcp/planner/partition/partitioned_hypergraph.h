// SPDX-License-Identifier: Apache-2.0
// A k-way partition of a hypergraph with pin counts, part weights, km1 and a gain cache, all kept
// up to date incrementally on every move.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dcp/planner/partition/hypergraph.h"

namespace dcp {

// Gains follow the connectivity metric: moving v from a to b changes km1 by -gain(v, b), with
//   gain(v, b) = benefit(v) - penalty(v, b)
//   benefit(v)    = sum of w(e) over nets e of v where v is the only pin in a     (e leaves a)
//   penalty(v, b) = sum of w(e) over nets e of v with no pin in b                 (e enters b)
// The cache stores benefit(v) and conn(v, b) = sum of w(e) over nets of v with a pin in b, so
// penalty(v, b) = incident_weight(v) - conn(v, b). A move only changes the cache on nets whose pin
// count in a drops to 0 or 1 or in b rises to 1 or 2; those are the only pins visited. conn takes
// vertices x k words; past kMaxConnWords (a million work units over 256 devices would take
// gigabytes) it is not kept, and a gain reads the pin counts of the vertex's nets instead: the
// same values, slower to ask for, which suits a partition that moves few vertices.
class PartitionedHypergraph {
 public:
  static constexpr std::size_t kMaxConnWords = std::size_t{1} << 26;

  // Every vertex must have a part in [0, k). conn is kept where vertices x k <= max_conn_words.
  PartitionedHypergraph(const Hypergraph& graph, PartId k, std::vector<PartId> parts,
                        std::size_t max_conn_words = kMaxConnWords);

  const Hypergraph& graph() const { return *graph_; }
  PartId k() const { return k_; }
  PartId part(VertexId v) const { return parts_[static_cast<std::size_t>(v)]; }
  const std::vector<PartId>& parts() const { return parts_; }
  const VertexWeight& part_weight(PartId p) const {
    return part_weights_[static_cast<std::size_t>(p)];
  }
  std::int32_t pin_count(NetId e, PartId p) const {
    return pin_counts_[static_cast<std::size_t>(e) * static_cast<std::size_t>(k_) +
                       static_cast<std::size_t>(p)];
  }
  std::int32_t connectivity(NetId e) const { return connectivity_[static_cast<std::size_t>(e)]; }
  Weight km1() const { return km1_; }

  Weight benefit(VertexId v) const { return benefit_[static_cast<std::size_t>(v)]; }
  Weight gain(VertexId v, PartId to) const {
    return benefit_[static_cast<std::size_t>(v)] - incident_weight_[static_cast<std::size_t>(v)] +
           conn_of(v, to);
  }
  // True if v has a net with a pin in another part (only such vertices can gain).
  bool is_boundary(VertexId v) const;

  // Moves v to `to` (different from its part) and updates everything. Vertices whose gain cache
  // changed are appended to `touched` if it is given (v itself included).
  void move(VertexId v, PartId to, std::vector<VertexId>* touched = nullptr);

  // km1 and the gain cache recomputed from scratch, for tests.
  Weight recompute_km1() const;
  Weight recompute_gain(VertexId v, PartId to) const;

 private:
  std::int32_t& pins_in(NetId e, PartId p) {
    return pin_counts_[static_cast<std::size_t>(e) * static_cast<std::size_t>(k_) +
                       static_cast<std::size_t>(p)];
  }
  Weight conn_of(VertexId v, PartId p) const {
    if (conn_.empty()) return conn_from_pins(v, p);
    return conn_[static_cast<std::size_t>(v) * static_cast<std::size_t>(k_) +
                 static_cast<std::size_t>(p)];
  }
  Weight conn_from_pins(VertexId v, PartId p) const;
  Weight& conn(VertexId v, PartId p) {
    return conn_[static_cast<std::size_t>(v) * static_cast<std::size_t>(k_) +
                 static_cast<std::size_t>(p)];
  }

  const Hypergraph* graph_;
  PartId k_;
  std::vector<PartId> parts_;
  std::vector<VertexWeight> part_weights_;
  std::vector<std::int32_t> pin_counts_;
  std::vector<std::int32_t> connectivity_;
  std::vector<Weight> benefit_;
  std::vector<Weight> incident_weight_;
  std::vector<Weight> conn_;  // empty where it would take more than kMaxConnWords
  Weight km1_ = 0;
};

}  // namespace dcp
