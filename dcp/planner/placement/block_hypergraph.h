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
//     q block it is. Forward they read its Q and produce partials of its O and LSE; backward they
//     read its Q, dO, LSE and delta and produce partials of its dQ. The pins are the same for all,
//     so one net carries every weight.
//   kKeyValue, one per (token block, kv head block): the work units reading its K and V, forward
//     and backward, and producing partials of its dK and dV backward.
// The bytes are the Programs' (value_bytes of the plan header: inputs in the storage dtype,
// partials in the partial dtype). An input crosses to each other node that reads it once and is
// relayed inside it; partials made on several devices of a node are reduced inside the node and
// cross to the owner's node once. So a net spanning devices D over nodes N moves its bytes
// (|N| - 1) times between nodes and (|D| - |N|) times inside them: its weight is what moves per
// extra device, over both passes, and km1 is the bytes a training step moves (StepPricing says
// how the plan ships them).
enum class NetKind : std::uint8_t { kQueryOutput, kKeyValue };

// What one net moves per extra device it spans, by pass and direction.
struct NetBytes {
  std::int64_t forward_input = 0;    // owner -> reader: Q or KV
  std::int64_t forward_output = 0;   // contributor -> owner: O and LSE partials
  std::int64_t backward_input = 0;   // owner -> reader: Q, dO, LSE, delta, or KV
  std::int64_t backward_output = 0;  // contributor -> owner: dQ, or dK and dV partials
  std::int64_t forward() const { return forward_input + forward_output; }
  std::int64_t backward() const { return backward_input + backward_output; }
};

struct BlockHypergraph {
  Hypergraph graph;
  BlockId token_blocks = 0;
  std::vector<BlockId> net_owner;  // the token block of each net
  std::vector<NetKind> net_kind;
  std::vector<NetBytes> net_bytes;  // net weight = forward() + backward()

  VertexId vertex_of_block(BlockId block) const { return block; }
  VertexId vertex_of_work_unit(WorkUnitId unit) const {
    return static_cast<VertexId>(token_blocks + unit);
  }
};

// How the plan ships what the nets price.
struct StepPricing {
  // Every device keeps the kv values it received in the forward pass (kept_values.h): kv moves
  // in the forward pass only.
  bool kv_kept_for_backward = false;
  // The dtype partials travel in (PlanHeader::partial_dtype): fp32 or the storage dtype.
  DType partial_dtype = DType::kFp32;
};

// Throws InvalidInput if the partial dtype is neither fp32 nor the workload's storage dtype.
BlockHypergraph build_block_hypergraph(const Workload& workload, const StepPricing& pricing = {});

// Head symmetry: the work units of one tile in the head blocks that read the same kv head block
// have the same nets up to the head and the same weight. Their group id (tile * kv head blocks +
// kv head block) per vertex, -1 for token blocks: PartitionRequest::groups.
std::vector<std::int64_t> head_groups(const Workload& workload);

}  // namespace dcp
