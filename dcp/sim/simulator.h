// SPDX-License-Identifier: Apache-2.0
// The event simulator: runs every device's Program of one pass together on a described cluster.
//
// Each device has a compute stream, which runs its instructions in order at the cost model's
// prices, and a communication stream. A Launch posts its sends and receives and costs the
// compute stream nothing; a send and its matching receive (the n-th send from a to b and the
// n-th receive on b from a) form a transfer, which starts once both ends have posted it, waits
// the link's latency, and then shares bandwidth with every other transfer on its link sides:
// the sender's intra-node send side and the receiver's intra-node receive side inside a node, the
// sending node's network interface and the receiving node's between nodes. Sharing is max-min
// fair and recomputed whenever a transfer starts or ends. A launch completes when its transfers
// and every earlier launch of the device have completed; a Wait holds the compute stream until
// then. docs/simulator.md describes the model and its outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/model/cluster.h"

#include "dcp/program/program.h"
#include "dcp/sim/cost_model.h"

namespace dcp::sim {

// One instruction on a device's compute stream. A Wait's interval is the time it held the stream.
struct ComputeEvent {
  std::int32_t instruction = 0;
  std::int32_t stage = 0;
  double start = 0;
  double end = 0;
};

// One transfer: posted by both ends at `posted`, moving bytes from `ready` (posted + latency) to
// `end`.
struct TransferEvent {
  std::int32_t src = 0;
  std::int32_t dst = 0;
  std::int32_t src_instruction = 0;  // the Launch instructions that posted it
  std::int32_t dst_instruction = 0;
  std::int64_t bytes = 0;
  std::int64_t message_bytes = 0;  // the sender's launch's bytes to the receiver (one message)
  bool inter_node = false;
  double posted = 0;
  double ready = 0;
  double end = 0;
};

struct DeviceTimeline {
  std::vector<ComputeEvent> events;  // in instruction order
  double end = 0;                    // its last instruction and its last transfer done
  double compute_seconds = 0;        // attention, merge, sum, load, store
  // Of compute_seconds: partials narrowed to their travel dtype before sends, widened after
  // receives, and messages packed and unpacked (ExecutorModel::packs_messages).
  double convert_seconds = 0;
  double wait_seconds = 0;  // held in Wait
};

// Per stage (instruction_stage; the last is the epilogue): when its first instruction on any
// device started and its last ended, the busiest device's compute, and the time devices waited.
struct StageTime {
  double begin = 0;
  double end = 0;
  double max_compute = 0;
  double total_wait = 0;
};

// A stretch of the critical path: compute on one device (instructions [first, last]), or a
// transfer (its latency and bytes).
struct CriticalStep {
  enum class Kind : std::uint8_t { kCompute, kTransfer };
  Kind kind = Kind::kCompute;
  std::int32_t device = 0;  // compute: the device; transfer: the receiver
  std::int32_t first = 0;   // compute: first instruction; transfer: index in transfers
  std::int32_t last = 0;
  double start = 0;
  double end = 0;
};

struct PassSimulation {
  Pass pass = Pass::kForward;
  double seconds = 0;  // the pass: from 0 to the last device's end
  std::vector<DeviceTimeline> devices;
  std::vector<TransferEvent> transfers;
  std::vector<StageTime> stages;
  // From time 0 to the end of the pass, in time order: whatever delayed the device that ended
  // last. Time not covered by a step is latency before a posted transfer could start.
  std::vector<CriticalStep> critical_path;
  double critical_compute_seconds = 0;
  double critical_transfer_seconds = 0;
};

// Simulates one pass: programs[d] is device d's Program of that pass. Throws InvalidInput if the
// spec is invalid, its shape is not the plan's cluster, the programs are not one per device of
// one pass, a send has no matching receive (or their sizes differ), or the programs deadlock.
PassSimulation simulate(const PlanHeader& header, const std::vector<Program>& programs,
                        const ClusterSpec& cluster, const ExecutorModel& executor = {});

struct PlanSimulation {
  PassSimulation forward;
  PassSimulation backward;
  double seconds() const { return forward.seconds + backward.seconds; }
};
PlanSimulation simulate(const Plan& plan, const ClusterSpec& cluster,
                        const ExecutorModel& executor = {});

// The spec with the plan's shape, for presets (whose shape is only their default); a cluster
// file's shape must match the plan's.
ClusterSpec with_shape(ClusterSpec cluster, const ClusterShape& shape);

}  // namespace dcp::sim
