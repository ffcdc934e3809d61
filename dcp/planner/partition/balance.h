// SPDX-License-Identifier: Apache-2.0
// Load ratios against per-part caps, shared by the partitioner's phases.
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

#include "dcp/planner/partition/hypergraph.h"

namespace dcp {

// How full a part would be: the larger of load/cap over both dimensions (0 when both are empty;
// infinite when a dimension has load but no capacity).
inline double fill_ratio(const VertexWeight& load, const VertexWeight& cap) {
  const auto ratio = [](Weight l, Weight c) {
    if (c > 0) return static_cast<double>(l) / static_cast<double>(c);
    return l > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  };
  return std::max(ratio(load.compute, cap.compute), ratio(load.memory, cap.memory));
}

inline bool within(const VertexWeight& load, const VertexWeight& cap) {
  return load.compute <= cap.compute && load.memory <= cap.memory;
}

}  // namespace dcp
