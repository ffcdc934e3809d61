// SPDX-License-Identifier: Apache-2.0
// The whole planner: placement, forward and backward schedules, compilation into a Plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dcp/model/cluster.h"
#include "dcp/model/workload.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/planner/schedule/kept_values.h"
#include "dcp/planner/schedule/stage_scheduler.h"
#include "dcp/program/program.h"

namespace dcp {

struct PlanOptions {
  Strategy strategy = Strategy::kDcp;
  ClusterSpec cluster;         // the shape and the cost model
  PlacementOptions placement;  // dcp only; its cluster and seed are set from the fields here
  ScheduleOptions schedule;    // dcp only
  MaskedTiles masked_tiles = MaskedTiles::kSkip;  // static strategies only
  // Static strategies (and dcp's static candidates): the data parallel degree (static_plans.h),
  // or 0 for automatic_data_parallel's.
  std::int32_t static_data_parallel = 1;
  // loongtrain: the inner ring's head groups (static_plans.h); 0: the head groups per node.
  std::int32_t loongtrain_window = 0;
  std::uint64_t seed = 0;
  // dcp, dcp-pure: token block sizes to plan dcp's own placement at, the workload re-cut at each
  // (sizes above the longest sequence's next power of two collapse into one); the fastest under
  // the simulator is kept. Empty: the workload's own blocks only. kBlockSizeSweep is what an
  // automatic block size means to planning (the block sizes the DCP paper found best).
  std::vector<TokenCount> block_sizes;
  // dcp, dcp-pure with block_sizes given: where a few sequences are long (few_long_sequences: at
  // most 8 with one holding half the batch's tokens, or at most 4 under a dense mask), dcp also
  // runs its Programs on the layouts of kStructuredLayouts (OwnCandidate) and keeps the fastest of
  // all its plans. They keep every kv value read, so only with kept_kv_budget kKeepAllKv.
  bool structured_layouts = true;
  // dcp, dcp-pure with block_sizes given: the kRetryPartitions fastest partitions are placed again
  // at kRetryEpsCompute where placement.eps_compute is looser, and kept if faster (false: every
  // partition at placement.eps_compute, as the balance suite measures it).
  bool retry_tighter_balance = true;
  // dcp only: the kv bytes per device kept from the forward pass for the backward pass
  // (kept_values.h): kKeepAllKv, kKeepNoKv or a budget. Static strategies keep nothing (the
  // systems they stand for receive kv again in the backward pass).
  std::int64_t kept_kv_budget = kKeepAllKv;
  // The dtype partials (o, dq, dk, dv) travel in between devices: fp32 or the storage dtype
  // (they are accumulated in fp32 either way). Unset: partial_dtype_of's default.
  std::optional<DType> partial_dtype;
};

// The dtype `options` sends partials in for a workload stored in `storage`: the one set, else
// the storage dtype for dcp's own plans (measured in docs/scheduling.md) and for te
// (TransformerEngine sends dk and dv in kv's dtype), and fp32 for the other static strategies
// (the systems they stand for accumulate and send partials in fp32).
DType partial_dtype_of(const PlanOptions& options, DType storage);

struct PlanTimings {
  double partition_ms = 0;  // dcp's placement, or the static strategy's layout and schedules
  double schedule_forward_ms = 0;
  double schedule_backward_ms = 0;
  double compile_ms = 0;
  double total_ms = 0;
};

struct ScheduleSummary {
  std::int32_t stages = 0;
  std::int32_t fetch_launches = 0;  // dcp: the S chosen or given
  bool balanced = false;            // dcp: whether each stage's compute per device was capped
  ScheduleEstimate estimate;        // under PlanOptions::cluster
  bool own_outputs_last = false;    // dcp: whether own_outputs_last's schedule was kept
  std::int32_t stage_parts = 1;     // structured backward: stages each layout stage was cut into
};

// How Strategy::kDcp chose its plan: every candidate's simulated time under PlanOptions::cluster
// (dcp's own plan first, then each static strategy), and which one it kept.
struct PlanCandidate {
  std::string strategy;
  bool feasible = true;  // false: the strategy cannot run on the cluster (`reason`)
  std::string reason;
  // false: screened out; its schedule estimate (forward plus backward) was at least
  // kScreenFactor times the best simulated time so far, so it was not compiled.
  bool simulated = true;
  double estimate_seconds = 0;
  double forward_seconds = 0;  // simulated
  double backward_seconds = 0;
  // Screened by a lower bound of that estimate (static_estimate_lower_bound), so not even its
  // layout was built: estimate_seconds holds the bound.
  bool bounded = false;
  double seconds() const { return forward_seconds + backward_seconds; }
};
inline constexpr double kScreenFactor = 1.25;
inline constexpr TokenCount kBlockSizeSweep[] = {1024, 2048, 4096};

// One plan of dcp's own, simulated: its hypergraph placement at a block size, or a structured
// candidate: a static strategy's layout (its chunks, placement and ring schedules) run dcp's way,
// the kv a device reads in the forward pass kept for the backward pass (no kv travels backward)
// and partials in dcp's dtype. Ring layouts are what a batch dominated by one sequence needs:
// every step's kv comes from one neighbour, in one large message that the step's compute hides.
struct OwnCandidate {
  std::string layout = "partition";    // "partition", or the static strategy whose layout it runs
  TokenCount block_size = 0;           // partition: its block size
  DType partial_dtype = DType::kBf16;  // what its partials travel in
  // partition: placed at kRetryEpsCompute (one of the fastest partitions' block sizes again, at
  // the tighter compute balance), not at PlacementOptions::eps_compute.
  bool tighter_balance = false;
  double forward_seconds = 0;
  double backward_seconds = 0;
  double seconds() const { return forward_seconds + backward_seconds; }
};
// dcp's fastest plan is also tried with partials in fp32 (PlanOptions::partial_dtype unset) where,
// in a pass, its busiest device's conversions of partials take at least this share of its
// simulated time, and longer than the transfers on that pass's critical path times the pass's
// share of partial bytes (what fp32 would lengthen).
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
struct PlanSelection {
  std::vector<PlanCandidate> candidates;  // empty unless the strategy is kDcp
  std::string kept = "dcp";               // the candidate's strategy
  double simulate_ms = 0;                 // planning the static candidates and simulating all
};

struct BuiltPlan {
  Plan plan;
  Workload workload;  // what the plan computes: the input, or its re-cut for static strategies
  Placement placement;
  bool placement_within_bounds = true;
  KeptKv kept;  // empty lists for static strategies
  ScheduleSummary forward;
  ScheduleSummary backward;
  PlanTimings timings;  // total_ms includes the selection
  PlanSelection selection;
  // dcp, dcp-pure with PlanOptions::block_sizes: every plan of its own dcp tried, in order (the
  // block sizes, then any structured candidates); dcp's own plan is the fastest (the first on a
  // tie), kept unless a static strategy is faster.
  std::vector<OwnCandidate> own_candidates;
  std::int32_t data_parallel = 1;  // static strategies: the data parallel degree used
};

// kDcp: dcp's own plan (placement, schedules, compile), then every static strategy that can run
// on the cluster; each is simulated forward and backward under options.cluster (dcp::sim), and
// the fastest in forward plus backward time is kept (dcp's own on a tie). A static strategy whose
// schedule estimate is at least kScreenFactor times the best simulated time is not compiled. Since
// dcp can simulate before it executes, it is never slower than a static strategy under the cost
// model. The kept plan's header names "dcp" or "dcp/<static strategy>". kDcpPure: dcp's own plan
// always. dcp's own plan is the fastest of its plans at PlanOptions::block_sizes when given, and
// of its structured candidates (PlanOptions::structured_layouts).
// Throws InvalidInput if the cluster spec is invalid, or the strategy cannot run on it.
BuiltPlan build_plan(const Workload& workload, const PlanOptions& options);

// kDcp's selection given dcp's own plan: `own` is what build_plan returns for `options` with
// strategy kDcpPure, and the result is what it returns for `options` (strategy kDcp): the same
// plan and candidates, and timings.total_ms the selection's alone. Lets a caller that wants both
// place dcp's own plan once (dcp bench --suite micro). Throws InvalidInput unless options.strategy
// is kDcp, or as build_plan does.
BuiltPlan select_plan(const Workload& workload, const PlanOptions& options, BuiltPlan own);

// A structured candidate: dcp's Programs (options.strategy dcp or dcp-pure names the plan) on the
// layout of static strategy `layout` over all devices (loongtrain: at options.loongtrain_window,
// its outer hops as static_layout sends them), every kv value a device reads kept for the backward
// pass, each pass with its last stage's own outputs last where the estimate finds that faster
// (docs/scheduling.md). Throws InvalidInput as static_plan does.
BuiltPlan build_structured(Strategy layout, const Workload& workload, const PlanOptions& options);

// A static strategy (options.strategy) in steps, for callers that rank several of its layouts
// before compiling one: a lower bound of its estimate from its structure alone
// (static_estimate_lower_bound), its layout (static_plan with options' static fields; a double
// ring's passes with their outer hops sent whichever way the estimate finds faster,
// spread_outer_hops), the schedule estimates of that layout's passes under options.cluster, and the
// plan build_plan would return for it, given those estimates (timings.partition_ms then excludes
// the layout).
struct PassEstimates {
  ScheduleEstimate forward;
  ScheduleEstimate backward;
  double seconds() const { return forward.seconds + backward.seconds; }
};
double static_plan_lower_bound(const Workload& workload, const PlanOptions& options);
StaticPlan static_layout(const Workload& workload, const PlanOptions& options,
                         PassEstimates* estimates = nullptr);  // its passes' estimates, if given
PassEstimates static_plan_estimate(const StaticPlan& layout, const PlanOptions& options);
BuiltPlan build_static(StaticPlan layout, const PlanOptions& options,
                       const PassEstimates& estimates);

}  // namespace dcp
