// SPDX-License-Identifier: Apache-2.0
// hMETIS export.
#include "dcp/planner/partition/hmetis_format.h"

#include <cstdint>
#include <limits>
#include <string>

#include "dcp/core/error.h"

namespace dcp {

void write_hmetis(const Hypergraph& graph, std::ostream& out) {
  out << graph.net_count() << ' ' << graph.vertex_count() << " 1\n";
  for (NetId e = 0; e < graph.net_count(); ++e) {
    const Weight weight = graph.net_weight(e);
    if (weight < 1 || weight > std::numeric_limits<std::int32_t>::max()) {
      throw InvalidInput("net " + std::to_string(e) + " has weight " + std::to_string(weight) +
                         ", outside the [1, 2^31 - 1] an hMETIS file can hold");
    }
    out << weight;
    for (const VertexId v : graph.pins(e)) out << ' ' << (v + 1);
    out << '\n';
  }
}

void write_vertex_weights(const Hypergraph& graph, std::ostream& out) {
  for (VertexId v = 0; v < graph.vertex_count(); ++v)
    out << graph.weight(v).compute << ' ' << graph.weight(v).memory << '\n';
}

}  // namespace dcp
