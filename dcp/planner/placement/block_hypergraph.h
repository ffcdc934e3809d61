// SPDX-License-Identifier: Apache-2.0
// The placement hypergraph of a workload: token blocks and work units as vertices, tensors as nets.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/model/workload.h"

#include "dcp/planner/partition/hypergraph.h"

namespace dcp {

// Vertices: token block b is vertex b (memory weight: bytes of its Q, KV, O and LSE over all
// heads; no compute), work unit w is vertex token_blocks + w (compute weight: pairs times heads of
// its head block, proportional to FLOPs; no memory).
// Nets, each joining a token block with the work units that use one of its tensors:
//   kQueryOutput, one per (token block, q head block): the work units of that head block whose
//     q block it is. They read its Q and produce partials of its O and LSE, so the pins are the
//     same for both and one net carries both weights (input_bytes = Q, output_bytes = O + LSE).
//   kKeyValue, one per (token block, kv head block): the work units reading its K and V.
// A net's weight is what moves if it is cut: input_bytes + output_bytes per extra device.
enum class NetKind : std::uint8_t { kQueryOutput, kKeyValue };

struct BlockHypergraph {
  Hypergraph graph;
  BlockId token_blocks = 0;
  std::vector<BlockId> net_owner;  // the token block of each net
  std::vector<NetKind> net_kind;
  std::vector<std::int64_t> input_bytes;   // moved owner -> reader, per extra device
  std::vector<std::int64_t> output_bytes;  // moved contributor -> owner, per extra device

  VertexId vertex_of_block(BlockId block) const { return block; }
  VertexId vertex_of_work_unit(WorkUnitId unit) const {
    return static_cast<VertexId>(token_blocks + unit);
  }
};

BlockHypergraph build_block_hypergraph(const Workload& workload);

// Head symmetry: the work units of one tile in the head blocks that read the same kv head block
// have the same nets up to the head and the same weight. Their group id (tile * kv head blocks +
// kv head block) per vertex, -1 for token blocks: PartitionRequest::groups.
std::vector<std::int64_t> head_groups(const Workload& workload);

}  // namespace dcp
