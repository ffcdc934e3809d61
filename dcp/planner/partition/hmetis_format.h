// SPDX-License-Identifier: Apache-2.0
// The hMETIS hypergraph file format, so that other partitioners (hMETIS, KaHyPar, Mt-KaHyPar,
// PaToH's converters) can be run on exactly the hypergraphs dcp partitions.
#pragma once

#include <ostream>

#include "dcp/planner/partition/hypergraph.h"

namespace dcp {

// Writes `graph` in hMETIS format with net weights (format code 1): a header line
// "<nets> <vertices> 1", then one line per net, "<weight> <pin> <pin> ...", pins 1-based. hMETIS
// files carry one vertex weight; dcp's two (compute, memory) go to write_vertex_weights instead.
// Throws InvalidInput if a net weight is not in [1, 2^31 - 1], the range hMETIS readers accept.
void write_hmetis(const Hypergraph& graph, std::ostream& out);

// One line per vertex, in vertex order: "<compute> <memory>".
void write_vertex_weights(const Hypergraph& graph, std::ostream& out);

}  // namespace dcp
