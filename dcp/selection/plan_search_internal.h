// SPDX-License-Identifier: Apache-2.0
// The search's pieces that its files share (own_plan_search.cc, plan_selection.cc); not for other
// layers.
#pragma once

#include <optional>
#include <vector>

#include "dcp/selection/plan_search.h"
#include "dcp/sim/simulator.h"
#include "dcp/sim/step_model.h"

namespace dcp::plan_search {

// A plan of dcp's own search with its simulated times.
struct SimulatedPlan {
  BuiltPlan plan;
  OwnCandidate simulated;
};

// dcp's own plan: on the workload's blocks, or the fastest under the simulator of those at
// options.search.block_sizes (its own_candidates then hold every candidate's simulated times). With
// `runners_up`, also the fastest partition (storage-dtype partials) at each block size other than
// the kept plan's, fastest first: what a search over several kinds places the other kinds on.
BuiltPlan build_own(const Workload& workload, const PlanOptions& options,
                    std::vector<SimulatedPlan>* runners_up = nullptr);

// The block sizes build_own partitions the workload at: options.search.block_sizes, each at most
// the longest sequence's length rounded up to a power of two, without repeats, and without those
// below kDenseMinBlockSize where that rule applies (plan_search.h). Throws InvalidInput for a
// size below 1.
std::vector<TokenCount> searched_block_sizes(const Workload& workload, const PlanOptions& options);

// What the rest of the layer adds to each of `built`'s simulated passes: sim::lockstep_passes
// over its devices (their Programs' ends, the rest for the tokens each holds) less the pass's
// time (0 without PlanOptions::token_flops). Throws InvalidInput as placement_options_of does.
sim::LockstepPasses token_seconds_of(const BuiltPlan& built, const sim::PlanSimulation& simulation,
                                     const PlanOptions& options);

// The batch's sequences dealt whole to the nodes by their work (deal_by_work: attention pairs and
// the rest of the layer per token), each node holding at most device_bound x its devices' tokens;
// nothing on one node, or where some sequence does not fit a node's share (the node groups do not
// apply). imbalance: the most work a node was dealt over the mean node's. node_balance: each
// node's devices are also held within placement.eps_memory of that node's own mean.
using NodeShares = std::vector<std::vector<std::size_t>>;
struct NodeDeal {
  NodeShares shares;
  double imbalance = 1;
  double device_bound = 0;
  bool node_balance = false;
};
// The deal at dcp's memory balance: device_bound (1 + eps_memory) x the cluster's mean device
// (placement_options_of's eps, within placement.max_device_tokens).
std::optional<NodeDeal> node_shares(const Workload& workload, const PlanOptions& options);
// The deal up to placement.max_device_tokens where that is above node_shares's bound, with
// node_balance: the layout of data-parallel groups of a node, each filled up to the limit and
// balanced against its own mean, as a pool planned group by group holds memory. Nothing where
// there is no such limit, or as node_shares.
std::optional<NodeDeal> node_shares_at_limit(const Workload& workload, const PlanOptions& options);

// dcp's own plan in node groups (kNodeGroupsLayout, plan_search.h) on `deal` with build_own's
// options: each node's plan, and the plan of the whole cluster they join into. Under kDcp a node
// may run a static strategy, its layout at the node's own head blocks.
struct NodeGroups {
  NodeShares shares;  // the deal's
  // Per node (nothing where the deal gave it no sequence): its share, the options it was planned
  // with and its plan.
  std::vector<std::optional<Workload>> workloads;
  std::vector<PlanOptions> options;
  std::vector<std::optional<BuiltPlan>> plans;
  std::optional<BuiltPlan> joined;  // its Programs compiled
};
NodeGroups build_node_groups(const Workload& workload, const PlanOptions& options,
                             const NodeDeal& deal);
// The same nodes' plans with partials in `partial_dtype`, joined: dcp's own built again on its
// placement, a static strategy's layout again.
BuiltPlan node_groups_in(const Workload& workload, const PlanOptions& options,
                         const NodeGroups& groups, DType partial_dtype);

// The own candidate build_own kept, the first fastest of plan.own_candidates (whose simulated
// times are the plan's), or nullptr where none was simulated (one block size).
const OwnCandidate* kept_own(const BuiltPlan& plan);

}  // namespace dcp::plan_search
