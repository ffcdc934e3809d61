// SPDX-License-Identifier: Apache-2.0
// One plan of a strategy: placement, forward and backward schedules, compilation into a Plan; and
// the options, plans and candidates that dcp's search above the planner (dcp/selection/) shares.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dcp/core/timing.h"

#include "dcp/model/cluster.h"
#include "dcp/model/workload.h"

#include "dcp/planner/baselines/static_plans.h"
#include "dcp/planner/placement/hierarchical_placer.h"
#include "dcp/planner/schedule/kept_values.h"
#include "dcp/planner/schedule/stage_scheduler.h"
#include "dcp/program/program.h"

namespace dcp {

// SearchOptions::screen_factor's default. Over the kinds suite's 570 work placements, a schedule
// estimate was 0.75 to 1.06 times the simulated time, so a candidate screened at 1.25 x the
// fastest is at least 1.18 x slower; static plans' estimates are within a few percent
// (docs/simulator.md).
inline constexpr double kScreenFactor = 1.25;

// What dcp's search above the planner (dcp/selection/plan_search.h) reads: which of its own plans
// it tries and which candidates it screens out. Nothing in the planner reads these; all apply to
// dcp and dcp-pure, and all but screen_factor only with block_sizes given.
struct SearchOptions {
  // Token block sizes to plan dcp's own placement at, the workload re-cut at each (sizes above
  // the longest sequence's next power of two collapse into one); the search keeps the fastest
  // under the simulator. Empty: the workload's own blocks only, and no search. kBlockSizeSweep is
  // what an automatic block size means to planning (the block sizes the DCP paper found best).
  std::vector<TokenCount> block_sizes;
  // Where a few sequences are long (few_long_sequences: at most 8 with one holding half the
  // batch's tokens, or at most 4 under a dense mask), dcp also runs its Programs on the layouts of
  // kStructuredLayouts (OwnCandidate) and keeps the fastest of all its plans. They keep every kv
  // value read, so only with kept_kv_budget kKeepAllKv.
  bool structured_layouts = true;
  // dcp also runs its Programs on sequences packed whole (packed_placement at
  // placement.eps_memory by each of its rules, OwnCandidate layouts "packed" and "packed best
  // fit") at the smallest block size it searches, the sequences it keeps whole on a device at the
  // largest (whole_sequences_reblocked).
  bool packed_layout = true;
  // Over more than one node, dcp also runs its Programs on a placement in node groups
  // (OwnCandidate layout kNodeGroupsLayout): the sequences dealt whole to the nodes by their work,
  // each node's share placed by dcp's own search on that node alone, at the block size it finds
  // fastest there (under kDcp a node may run a static strategy where that is faster).
  bool node_groups = true;
  // dcp's own plans include its hypergraph partitions at each block size (and their retries);
  // false: only its other layouts (packings, node groups, structured layouts). A node group's
  // search leaves them out where every sequence of its share fits a device whole.
  bool partitions = true;
  // The kRetryPartitions fastest partitions are placed again at kRetryEpsCompute where
  // placement.eps_compute is looser, and kept if faster (false: every partition at
  // placement.eps_compute, as the balance suite measures it).
  bool retry_tighter_balance = true;
  // A candidate whose estimate (a schedule's, or a bound of it) is at least this many times the
  // fastest simulated so far is neither compiled nor simulated; infinity compiles and simulates
  // every candidate. At least 1.
  double screen_factor = kScreenFactor;
};

// One plan request's options: the strategy first, then what the plan is (cluster, seed, the
// values it keeps and sends, the rest of the layer), then one group per phase, each read by that
// phase alone. validate(PlanOptions) checks them where they enter (build_plan, build_model_plan).
struct PlanOptions {
  Strategy strategy = Strategy::kDcp;
  ClusterSpec cluster;  // the shape and the cost model
  std::uint64_t seed = 0;
  // dcp only: the kv bytes per device kept from the forward pass for the backward pass
  // (kept_values.h): kKeepAllKv, kKeepNoKv or a budget. Static strategies keep nothing (the
  // systems they stand for receive kv again in the backward pass).
  std::int64_t kept_kv_budget = kKeepAllKv;
  // The dtype partials (o, dq, dk, dv) travel in between devices: fp32 or the storage dtype
  // (they are accumulated in fp32 either way). Unset: partial_dtype_of's default.
  std::optional<DType> partial_dtype;
  // The FLOPs of the rest of a layer per token, forward and backward (projections, MLP, norms: the
  // model's per-token FLOPs outside attention over its attention layers), which every device runs
  // for the tokens it holds, priced at the cluster's forward rate. dcp's search compares candidates
  // by their step with it (PlanCandidate::token_seconds), and its packings and node groups weigh
  // sequences by it beside their attention (pairs_per_token_of). 0: attention alone. At least 0.
  double token_flops = 0;

  PlacementOptions placement;  // dcp's placement; its cluster and seed are set from the above
  ScheduleOptions schedule;    // dcp's schedules
  // The static strategies' layouts (and dcp's static candidates): masked tiles, the data parallel
  // degree (0: automatic_data_parallel's), loongtrain's inner ring (static_plans.h).
  StaticOptions statics;
  SearchOptions search;  // dcp's search (dcp/selection/plan_search.h)
};

// Throws InvalidInput naming the option unless the cluster, the schedule options, token_flops
// (a number >= 0), search.search.screen_factor (>= 1), the placement options (validate
// (PlacementOptions): epsilons >= 0, max_device_tokens >= 0) and the static options' degrees (>= 0)
// are valid.
void validate(const PlanOptions& options);

// The dtype `options` sends partials in for a workload stored in `storage`: the one set, else
// the storage dtype for dcp's own plans (measured in docs/scheduling.md) and for te
// (TransformerEngine sends dk and dv in kv's dtype), and fp32 for the other static strategies
// (the systems they stand for accumulate and send partials in fp32).
DType partial_dtype_of(const PlanOptions& options, DType storage);

// The placement options dcp's plans of `workload` are placed with under `options`: its placement
// options with its cluster, seed, kept kv, partial dtype and token compute (token_flops in the
// work units' units), and eps_memory lowered to what placement.max_device_tokens allows where that
// is tighter. Throws InvalidInput for a negative or non-finite token_flops, or a token limit the
// batch does not fit on the cluster's devices.
PlacementOptions placement_options_of(const PlanOptions& options, const Workload& workload);

// The rest of one layer per token on one device: options.token_flops at the cluster's forward
// rate, in seconds. Throws InvalidInput as placement_options_of does.
double seconds_per_token(const PlanOptions& options);
// The rest of one layer on the busiest device of `placement`: its tokens times
// options.token_flops at the cluster's forward rate, in seconds (0 without token_flops). Throws
// InvalidInput as placement_options_of does.
double token_seconds_of(const Workload& workload, const Placement& placement,
                        const PlanOptions& options);
// What no placement of `workload` goes below: the mean device's tokens, so priced.
double mean_token_seconds(const Workload& workload, const PlanOptions& options);
// The rest of one layer per token (options.token_flops) in pairs of one head's attention of
// `workload` (forward and backward alike, over its heads): what a search weighs tokens by beside
// pairs. Throws InvalidInput as placement_options_of does.
double pairs_per_token_of(const Workload& workload, const PlanOptions& options);

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

// How Strategy::kDcp chose its plan (dcp/selection/plan_search.h): every candidate's simulated
// time under PlanOptions::cluster (dcp's own plan first, then each static strategy), and which one
// it kept.
struct PlanCandidate {
  std::string strategy;
  bool feasible = true;  // false: the strategy cannot run on the cluster (`reason`)
  std::string reason;
  // false: screened out; its schedule estimate (forward plus backward) was at least
  // SearchOptions::screen_factor times the best simulated time so far, so it was not compiled.
  bool simulated = true;
  double estimate_seconds = 0;
  double forward_seconds = 0;  // simulated
  double backward_seconds = 0;
  // Screened by a lower bound of that estimate (static_estimate_lower_bound), so not even its
  // layout was built: estimate_seconds holds the bound.
  bool bounded = false;
  // What the rest of the layer adds to the simulated passes, in seconds() and in
  // estimate_seconds; 0 without PlanOptions::token_flops. A plan of one mask: every device runs
  // its attention and the rest for its tokens, the devices going from layer to layer together
  // (sim::lockstep_layer_seconds); a model plan of several kinds, and an estimate: the rest on the
  // busiest device (token_seconds_of), over every layer.
  double token_seconds = 0;
  // Of token_seconds, what the forward pass gets (the backward the rest): plans of disjoint device
  // groups joined end each pass with their slowest group's (join_group_plans).
  double token_forward_seconds = 0;
  double seconds() const { return forward_seconds + backward_seconds + token_seconds; }
  double forward_step() const { return forward_seconds + token_forward_seconds; }
  double backward_step() const { return backward_seconds + token_seconds - token_forward_seconds; }
};

// One plan of dcp's own, simulated by dcp's search (dcp/selection/plan_search.h): its hypergraph
// placement at a block size, or a structured candidate: a static strategy's layout (its chunks,
// placement and ring schedules) run dcp's way, the kv a device reads in the forward pass kept for
// the backward pass (no kv travels backward) and partials in dcp's dtype. Ring layouts are what a
// batch dominated by one sequence needs: every step's kv comes from one neighbour, in one large
// message that the step's compute hides.
struct OwnCandidate {
  // "partition", "packed" or "packed best fit" (packed_placement's rules), "node groups"
  // (block_size 0: each node's own), or the static strategy whose layout it runs
  std::string layout = "partition";
  TokenCount block_size = 0;           // partition: its block size
  DType partial_dtype = DType::kBf16;  // what its partials travel in
  // partition: placed at kRetryEpsCompute (one of the fastest partitions' block sizes again, at
  // the tighter compute balance), not at PlacementOptions::eps_compute.
  bool tighter_balance = false;
  double forward_seconds = 0;
  double backward_seconds = 0;
  double token_seconds = 0;          // as PlanCandidate::token_seconds, for a plan of one mask
  double token_forward_seconds = 0;  // as PlanCandidate::token_forward_seconds
  double plan_ms = 0;                // wall-clock time building and simulating it
  double seconds() const { return forward_seconds + backward_seconds + token_seconds; }
  double forward_step() const { return forward_seconds + token_forward_seconds; }
  double backward_step() const { return backward_seconds + token_seconds - token_forward_seconds; }
};

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
  PlanTimings timings;  // total_ms includes the search and selection
  PlanSelection selection;
  // dcp, dcp-pure with SearchOptions::block_sizes: every plan of its own dcp tried, in order (the
  // block sizes, then any structured candidates); dcp's own plan is the fastest (the first on a
  // tie), kept unless a static strategy is faster.
  std::vector<OwnCandidate> own_candidates;
  std::int32_t data_parallel = 1;  // static strategies: the data parallel degree used
  // The schedules its Programs were compiled from: what a plan joined from plans of disjoint
  // device groups keeps of each (join_group_plans, dcp/planner/joined_plan.h).
  PassSchedule forward_schedule{};
  PassSchedule backward_schedule{};
};

// options.strategy's plan of the workload as it is: dcp's placement (dcp, dcp-pure) at the
// workload's blocks, its schedules and Programs; or a static strategy's layout and Programs. No
// search and no selection: SearchOptions::block_sizes, structured_layouts and retry_tighter_balance
// are read by dcp's search above the planner (build_plan, dcp/selection/plan_search.h).
// Throws InvalidInput if the cluster spec or the schedule options are invalid, or the strategy
// cannot run on the cluster.
BuiltPlan build_one_plan(const Workload& workload, const PlanOptions& options);

// dcp's own plan (options.strategy dcp or dcp-pure) on a placement made elsewhere (one kind's
// of place_kinds, say): the kv kept, both passes' schedules and Programs, partials in
// partial_dtype_of's dtype; timings count the schedules and compile only. Throws InvalidInput
// for a static strategy, or a placement that does not fit the workload.
BuiltPlan build_at_placement(const Workload& workload, Placement placement, bool within_bounds,
                             const PlanOptions& options);

// build_at_placement in two steps, so that a search can drop a plan its schedule estimates
// (BuiltPlan::forward, backward) already rule out before compiling it: the plan scheduled, its
// Programs not yet made, then compiled.
struct ScheduledPlan {
  BuiltPlan built;  // no Programs yet
  PassSchedule forward;
  PassSchedule backward;
};
ScheduledPlan schedule_at_placement(const Workload& workload, Placement placement,
                                    bool within_bounds, const PlanOptions& options);
BuiltPlan compile_scheduled(ScheduledPlan scheduled);

// dcp's own plan on `placed`'s workload and placement (a plan of build_one_plan's for a dcp
// strategy), scheduled and compiled again with partials travelling in `partial_dtype`: the kv
// kept, both passes' schedules and Programs. Its timings count `placed`'s placement as its own.
BuiltPlan build_on_placement(const BuiltPlan& placed, const PlanOptions& options,
                             DType partial_dtype);

// A structured candidate: dcp's Programs (options.strategy dcp or dcp-pure names the plan) on the
// layout of static strategy `layout` over all devices (loongtrain: at options.loongtrain_window,
// its outer hops as static_layout sends them), every kv value a device reads kept for the backward
// pass, each pass with its last stage's own outputs last where the estimate finds that faster
// (docs/scheduling.md). The backward pass's stages are cut into
// ScheduleOptions::structured_stage_parts parts, or where that is 0 into 1, 2 or 4, whichever the
// estimate finds faster (a cut only where lower by more than noise, kEstimateGainShare). Where
// the estimate picks a cut, the backward pass with whole stages is compiled too: the estimate's
// cut is not always the faster, and the planner does not simulate, so the caller chooses
// (build_structured, dcp/selection/plan_search.h). Throws InvalidInput as static_plan does.
struct BackwardVariant {
  std::vector<Program> programs;
  PassSchedule schedule;
  ScheduleSummary summary;
  double compile_ms = 0;
};
struct StructuredVariants {
  BuiltPlan built;  // its backward stages cut as asked, or as the estimate picks
  std::optional<BackwardVariant> whole_stages;  // where the estimate picked a cut
};
StructuredVariants build_structured_variants(Strategy layout, const Workload& workload,
                                             const PlanOptions& options);

// A static strategy (options.strategy) in steps, for callers that rank several of its layouts
// before compiling one: a lower bound of its estimate from its structure alone
// (static_estimate_lower_bound), its layout (static_plan with options' static fields; a double
// ring's passes with their outer hops sent whichever way the estimate finds faster,
// spread_outer_hops), the schedule estimates of that layout's passes under options.cluster, and the
// plan build_one_plan would return for it, given those estimates (timings.partition_ms counts from
// `layout_start`: by default it excludes the layout).
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
                       const PassEstimates& estimates,
                       Clock::time_point layout_start = Clock::now());

}  // namespace dcp
