// SPDX-License-Identifier: Apache-2.0
// dcp's search for its plan under the simulator: its own plans at several block sizes and
// balances, its structured candidates, partials in fp32, and then every static strategy's plan;
// the fastest simulated is kept. The planner below builds each plan; this layer chooses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "dcp/model/workload.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/sim/simulator.h"
#include "dcp/sim/step_model.h"

namespace dcp {

// kDcp: dcp's own plan (placement, schedules, compile), then every static strategy that can run
// on the cluster; each is simulated forward and backward under options.cluster (dcp::sim), and
// the fastest in forward plus backward time is kept (dcp's own on a tie). A static strategy whose
// schedule estimate is at least options.search.screen_factor times the best simulated time is not
// compiled. Since dcp can simulate before it executes, it is never slower than a static strategy
// under the cost model. The kept plan's header names "dcp" or "dcp/<static strategy>". kDcpPure:
// dcp's own plan always. dcp's own plan is the fastest of its plans at SearchOptions::block_sizes
// when given, and of its structured candidates (SearchOptions::structured_layouts). A static
// strategy: its plan (build_one_plan). Throws InvalidInput if the cluster spec is invalid, or the
// strategy cannot run on it.
BuiltPlan build_plan(const Workload& workload, const PlanOptions& options);

// kDcp's selection given dcp's own plan: `own` is what build_plan returns for `options` with
// strategy kDcpPure, and the result is what it returns for `options` (strategy kDcp): the same
// plan and candidates, and timings.total_ms the selection's alone. Lets a caller that wants both
// place dcp's own plan once (dcp bench --suite micro). Throws InvalidInput unless options.strategy
// is kDcp, or as build_plan does.
BuiltPlan select_plan(const Workload& workload, const PlanOptions& options, BuiltPlan own);

// A structured candidate as dcp's search tries it: build_structured_variants's plan, and where
// the estimate cut its backward stages, the faster under the simulator of that cut and the whole
// stages (the whole on a tie). That choice is timed as the backward pass's scheduling. Throws
// InvalidInput as static_plan does.
BuiltPlan build_structured(Strategy layout, const Workload& workload, const PlanOptions& options);

// One layer of `built` on each device, as dcp's search prices its step
// (sim::lockstep_layer_seconds): the device's Programs' ends in `simulation` and the rest of the
// layer for the tokens it holds (seconds_per_token(options) each). Throws InvalidInput as
// seconds_per_token does.
std::vector<sim::DeviceLayer> device_layers(const BuiltPlan& built,
                                            const sim::PlanSimulation& simulation,
                                            const PlanOptions& options);

// What an automatic block size means to planning: dcp's own plan at each of these sizes
// (SearchOptions::block_sizes), the block sizes the DCP paper found best.
inline constexpr TokenCount kBlockSizeSweep[] = {1024, 2048, 4096};
// With an automatic block size, dcp's own strategies plan at each size of kBlockSizeSweep and keep
// the fastest under the simulator (unless `plan` names its block sizes already). The one home of
// this rule, for plan_request, the command line and the benchmark suites alike.
void sweep_block_sizes_when_automatic(PlanOptions& plan, bool automatic_block_size);
// dcp's fastest plan is also tried with partials in fp32 (PlanOptions::partial_dtype unset) where
// its busiest devices' conversions of partials, over both passes, take at least this share of its
// simulated time, and in some pass longer than the transfers on that pass's critical path times the
// pass's share of partial bytes (what fp32 would lengthen).
inline constexpr double kFp32PartialsMinGain = 0.01;
// dcp's kRetryPartitions fastest partitions are placed again at this compute balance (device
// compute <= 1.2 x the mean) where PlacementOptions::eps_compute allows more, and kept if faster
// and within their bounds: the default balance lets the partitioner keep a sequence's rows together
// and move fewer bytes, which wins on most batches, but on some a tighter balance is the faster
// step. More than one partition is retried since the fastest at the default balance need not be
// the fastest at the tighter one. Of the balances tried (1.1 x to 1.25 x), 1.2 x gives the fastest
// micro-benchmark steps over both presets (docs/partitioner.md).
inline constexpr double kRetryEpsCompute = 0.2;
inline constexpr std::size_t kRetryPartitions = 2;
inline constexpr Strategy kStructuredLayouts[] = {Strategy::kHybrid, Strategy::kLoongTrain};
// OwnCandidate::layout of dcp's plans on packed_placement (SearchOptions::packed_layout), by its
// two rules: whole sequences where they add the least attention work, and best fit; packed at the
// smallest block size searched, the sequences kept whole then at the largest.
inline constexpr std::string_view kPackedLayout = "packed";
inline constexpr std::string_view kPackedBestFitLayout = "packed best fit";
// OwnCandidate::layout of dcp's plan in node groups (SearchOptions::node_groups): every node's
// share of the sequences, dealt whole by their work (deal_by_work), planned by dcp's own search on
// that node (its partitions and packings at every block size, not its structured layouts); the
// plans joined (join_group_plans), each sequence at its node's block size, each node's schedules
// as its search made them. Where a batch mixes short sequences with long ones that fit a node,
// each node then keeps the layout, stages and launches that suit its share, where one placement
// and schedule of the whole cluster keeps one of each for all; no sequence crosses a node.
inline constexpr std::string_view kNodeGroupsLayout = "node groups";
// OwnCandidate::layout of dcp's plan in node groups dealt up to PlacementOptions::max_device_tokens
// (node_shares_at_limit): each node filled up to the limit and balanced against its own mean, as
// data-parallel groups of a node each planned alone are.
inline constexpr std::string_view kNodeGroupsAtLimitLayout = "node groups at the token limit";
// On this many nodes and more, where the node groups apply (every sequence fits a node's share)
// and their deal gives no node more than kNodeGroupsMaxImbalance x the mean node's work, dcp's own
// plans of the whole cluster are its packing by least work and its node groups: its partitions
// and best-fit packing of the whole cluster, most of the search's time there, are not tried. With
// the work dealt evenly and no byte crossing a node, a partition of the whole cluster has little
// left to gain: over megatron, ldc and longalign batches of 2048 tokens per device (a100-p4de,
// 32/8 heads, length scales x0.5 to x2) the step kept without them was at most 3.5 % slower on 4
// nodes (1 batch of 34 over 1 %) and never on 8, but up to 6.8 % on 2 nodes. Where a sequence
// holds more work than a node's fair share (ldc at 8192 tokens per device, 32 nodes: the deal's
// busiest node 1.4 x the mean), a partition that spreads it over nodes was a third faster.
inline constexpr std::int32_t kNodeGroupsMinNodes = 4;
inline constexpr double kNodeGroupsMaxImbalance = 1.05;
// A few long sequences: at most kStructuredMaxSequences with one holding half the batch's tokens,
// or at most kStructuredDenseMaxSequences whose longest leaves at least kDenseSequenceDensity of
// its pairs (causal, full). A ring layout cuts every sequence into two chunks per device, so with
// many short sequences beside the long one it is slow to build and the partition places the short
// ones better. The dense rule brings in LongAlign causal batches of three or four sequences of
// 20K-60K tokens, where a ring layout can be the fastest (and, their longest being dense, drops
// their 1024-token partition, so the tighter-balance retry reaches the 4096-token one). Wider
// rules (more sequences, a smaller share for the longest) gain no faster steps and cost planning
// time (docs/benchmarks.md).
inline constexpr std::int32_t kStructuredMaxSequences = 8;
inline constexpr std::int32_t kStructuredDenseMaxSequences = 4;
bool few_long_sequences(const Workload& workload);
// Where the structured candidates run and the longest sequence's mask leaves at least
// kDenseSequenceDensity of its L x L pairs (a causal mask leaves about half), dcp's partition is
// not tried at block sizes below kDenseMinBlockSize, as long as a size of at least that is left:
// at 1024-token blocks it was never dcp's fastest plan on such batches (a100-p4de and h100-dgx;
// docs/block_model.md), and it has the most work units to place, schedule and compile.
inline constexpr double kDenseSequenceDensity = 0.45;
inline constexpr TokenCount kDenseMinBlockSize = 2048;

}  // namespace dcp
