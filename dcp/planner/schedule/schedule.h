// SPDX-License-Identifier: Apache-2.0
// A pass schedule: the compute stage of every work unit and every transfer, by launch.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dcp/model/cluster.h"
#include "dcp/model/workload.h"

#include "dcp/planner/placement/placement.h"
#include "dcp/planner/plan_header.h"
#include "dcp/program/program.h"

namespace dcp {

// One value of one token block: an input (Q, KV, QGrad) or a partial output (Out, DQ, DKV).
// head_block is a q head block, or a kv head block for KV and DKV.
struct ValueKey {
  SlotKind kind = SlotKind::kQ;
  BlockId block = 0;
  std::int32_t head_block = 0;
  friend auto operator<=>(const ValueKey&, const ValueKey&) = default;
};

// `value` moves from src to dst in launch `launch`. Launch l is issued when stage l starts and
// waited when stage l + 1 starts, so an input it carries can be used from stage l + 1 on; launches
// from `stages` on are issued after the last stage, each once the one before it is waited, and
// carry the last partial outputs. A partial output moves in the launch after the last stage that
// contributes to it on src; a partial received in launch l is merged into the receiver's own
// before launch l + 1 is issued (see add_partial_transfers).
struct Transfer {
  ValueKey value;
  DeviceId src = 0;
  DeviceId dst = 0;
  std::int32_t launch = 0;
  friend auto operator<=>(const Transfer&, const Transfer&) = default;
};

struct PassSchedule {
  Pass pass = Pass::kForward;
  std::int32_t stages = 1;
  std::vector<std::int32_t> unit_stage;  // per work unit
  std::vector<Transfer> transfers;       // sorted by (launch, src, dst, value)
  // How its partial outputs travel (add_partial_transfers's routing; kDirect where a strategy
  // moves them itself): what the compiled plan's header says (PlanHeader::partial_routing).
  PartialRouting partial_routing = PartialRouting::kDirect;
};

// The input values a pass reads: kQ (forward) or kQGrad (backward) of the q block, and kKV.
SlotKind query_kind(Pass pass);
ValueKey query_value(const Workload& workload, Pass pass, const WorkUnit& unit);
ValueKey key_value(const Workload& workload, const WorkUnit& unit);
// The order of PassSchedule::transfers: by (launch, src, dst, value).
bool transfer_order(const Transfer& a, const Transfer& b);
// Sorts [begin, end) into transfer_order.
void sort_transfers(std::vector<Transfer>::iterator begin, std::vector<Transfer>::iterator end);

// The partial outputs a work unit contributes to: kOut forward; kDQ and kDKV backward (a small
// range, not a vector: it is asked for every work unit of every pass).
struct OutputValues {
  std::array<ValueKey, 2> values;
  std::size_t count = 0;
  const ValueKey* begin() const { return values.data(); }
  const ValueKey* end() const { return values.data() + count; }
  const ValueKey& front() const { return values[0]; }
  const ValueKey& back() const { return values[count - 1]; }
};
OutputValues output_values(const Workload& workload, Pass pass, const WorkUnit& unit);

// Appends the transfers of partial outputs for the stages already in `schedule.unit_stage`, then
// sorts all transfers, and records `routing` in the schedule. kReduceInNode (program.h): partials
// of one value made on devices of the owner's node go to the owner; those made on several devices
// of another node are merged on one of them (the one that can send the merge first) and cross to
// the owner once, as the placement priced them (block_hypergraph.h); the merge may need one more
// launch after the last stage. kDirect: every contributing device sends its partial to the owner.
// With kv_gradients false, kDKV partials are left to the caller (a ring passes them along the
// ring).
void add_partial_transfers(const Workload& workload, const Placement& placement,
                           PassSchedule& schedule, PartialRouting routing,
                           bool kv_gradients = true);

// Launches of the schedule: stages + 1, or more when partials are merged after the last stage.
std::int32_t launch_count(const PassSchedule& schedule);

// Seconds one work unit's kernel takes on the cluster (no launch overhead): its unmasked pairs,
// or the whole tile for a workload that computes masked tiles (TileSelection::kEveryBlockPair).
double unit_seconds(const Workload& workload, const ClusterSpec& cluster, Pass pass,
                    const WorkUnit& unit);

// The schedule's time on the cluster. Devices run asynchronously: a device starts stage s + 1
// once it has finished stage s (its work units' kernels plus one launch overhead) and launch s
// has completed what it sends and receives; a transfer starts when both ends have issued its launch
// (at the start of their stage) and ends when the busier of its link sides has carried all of that
// launch's bytes: a device's intra-node send or receive side, or a node's network interface
// (shared by the node's devices), each at its bandwidth plus latency.
struct ScheduleEstimate {
  double seconds = 0;
  double compute_seconds = 0;         // the busiest device's compute: no schedule of it is faster
  std::vector<double> stage_compute;  // per stage, the slowest device's
  std::vector<double> launch_comm;    // per launch (launch_count), the slowest transfer's
};
ScheduleEstimate estimate(const Workload& workload, const Placement& placement,
                          const ClusterSpec& cluster, const PlanHeader& header,
                          const PassSchedule& schedule);

}  // namespace dcp
