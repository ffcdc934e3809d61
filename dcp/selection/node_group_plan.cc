// SPDX-License-Identifier: Apache-2.0
// dcp's own plan in node groups: the batch's sequences dealt whole to the nodes by their work,
// each node's share planned by dcp's own search on that node alone (under kDcp, or by a static
// strategy where that is faster there), the plans joined into one plan of the whole cluster with
// each node's schedules as its search made them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/model/sequence_batch.h"

#include "dcp/data/batch_packing.h"

#include "dcp/planner/joined_plan.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/selection/plan_search.h"
#include "dcp/selection/plan_search_internal.h"
#include "dcp/sim/step_model.h"

namespace dcp::plan_search {
namespace {

Workload sub_workload(const Workload& workload, const std::vector<std::size_t>& sequences) {
  std::vector<TokenCount> lengths;
  std::vector<SequenceMask> masks;
  for (const std::size_t seq : sequences) {
    lengths.push_back(workload.batch().length(static_cast<SeqIndex>(seq)));
    masks.push_back(workload.mask(static_cast<SeqIndex>(seq)));
  }
  return Workload(workload.shape(), SequenceBatch(std::move(lengths)), std::move(masks),
                  workload.blocks().block_size(), workload.heads().head_block_size());
}

// Tokens a device of the cluster may hold by dcp's memory balance: (1 + eps_memory) x the mean
// device's, the eps lowered where placement.max_device_tokens is tighter.
double balance_bound_of(const Workload& workload, const PlanOptions& options) {
  const ClusterShape& shape = options.cluster.shape;
  return (1 + placement_options_of(options, workload).eps_memory) *
         static_cast<double>(workload.batch().total_tokens()) /
         static_cast<double>(shape.devices());
}

// The sequences dealt whole to the nodes by their work, each node holding at most
// `device_bound` x its devices' tokens; nothing where some sequence is left out.
std::optional<NodeDeal> deal_to_nodes(const Workload& workload, const PlanOptions& options,
                                      double device_bound, bool node_balance) {
  const ClusterShape& shape = options.cluster.shape;
  if (shape.nodes < 2) return std::nullopt;
  const SequenceBatch& batch = workload.batch();
  // A sequence's work: its attention pairs and the rest of the layer for its tokens.
  const double token_pairs = pairs_per_token_of(workload, options);
  std::vector<double> works;
  for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
    works.push_back(static_cast<double>(workload.sequence_pairs(seq)) +
                    token_pairs * static_cast<double>(batch.length(seq)));
  }
  const auto capacity = static_cast<TokenCount>(
      std::floor(device_bound * static_cast<double>(shape.devices_per_node)));
  NodeDeal deal{deal_by_work(works, batch.lengths(), shape.nodes, capacity), 1, device_bound,
                node_balance};
  std::size_t dealt = 0;
  double total = 0;
  double most = 0;
  for (const std::vector<std::size_t>& share : deal.shares) {
    dealt += share.size();
    double work = 0;
    for (const std::size_t seq : share) work += works[seq];
    total += work;
    most = std::max(most, work);
  }
  // A sequence too long for a node's share needs the whole cluster's placement.
  if (dealt < static_cast<std::size_t>(batch.size())) return std::nullopt;
  if (total > 0) deal.imbalance = most * shape.nodes / total;
  return deal;
}

// The candidate a selection kept.
const PlanCandidate& kept_candidate(const PlanSelection& selection) {
  for (const PlanCandidate& candidate : selection.candidates) {
    if (candidate.strategy == selection.kept) return candidate;
  }
  throw Error("plan selection kept " + selection.kept + ", which is none of its candidates");
}

// Per pass, the most of the nodes' other than `skipped` (no node: pass the node count).
sim::LockstepPasses slowest_passes(const std::vector<sim::LockstepPasses>& passes,
                                   std::size_t skipped) {
  sim::LockstepPasses slowest;
  for (std::size_t node = 0; node < passes.size(); ++node) {
    if (node == skipped) continue;
    slowest.forward = std::max(slowest.forward, passes[node].forward);
    slowest.backward = std::max(slowest.backward, passes[node].backward);
  }
  return slowest;
}

// The nodes' plans joined, node n's on its devices from n x devices per node, with its
// schedules' stages and launches its own.
BuiltPlan join_nodes(const Workload& workload, const PlanOptions& options,
                     const std::vector<std::optional<BuiltPlan>>& plans, const NodeShares& shares) {
  std::vector<GroupPlan> joined;
  for (std::size_t node = 0; node < plans.size(); ++node) {
    if (!plans[node]) continue;
    joined.push_back({&*plans[node],
                      static_cast<DeviceId>(node) * options.cluster.shape.devices_per_node,
                      shares[node]});
  }
  return join_group_plans(workload, joined, options);
}

// Under kDcp, dcp's selection also runs the static strategies on a node's share where a few
// sequences are long (few_long_sequences, as for the structured layouts): a node whose share is one
// long sequence and a few short ones may run Ulysses faster than any plan of dcp's own. The joined
// plan ends each pass with its slowest node's (the rest of the layer included), so only a node
// that ends a pass is tried, the slowest first, and keeps a static plan only where that is faster
// on the node and leaves the joined step no longer. `node_seconds`: each node's plan's step alone,
// updated where a node's plan changes.
void run_static_strategies(NodeGroups& groups, std::vector<double>& node_seconds) {
  std::vector<sim::LockstepPasses> passes(groups.plans.size());
  for (std::size_t node = 0; node < groups.plans.size(); ++node) {
    if (!groups.plans[node]) continue;
    const OwnCandidate& own = *kept_own(*groups.plans[node]);
    passes[node] = {own.forward_step(), own.backward_step()};
  }
  std::vector<bool> tried(groups.plans.size(), false);
  while (true) {
    const sim::LockstepPasses slowest = slowest_passes(passes, groups.plans.size());
    std::optional<std::size_t> next;
    for (std::size_t node = 0; node < groups.plans.size(); ++node) {
      const bool ends_a_pass =
          passes[node].forward >= slowest.forward || passes[node].backward >= slowest.backward;
      if (groups.plans[node] && !tried[node] && ends_a_pass &&
          few_long_sequences(*groups.workloads[node]) &&
          (!next || node_seconds[node] > node_seconds[*next])) {
        next = node;
      }
    }
    if (!next) break;
    const std::size_t node = *next;
    tried[node] = true;
    // Selected at the static strategies' own head blocks (a quarter of the work units where a
    // device computes 4 heads, the same simulated time), the kept one built again at the share's.
    PlanOptions selecting = groups.options[node];
    selecting.statics.device_head_blocks = true;
    BuiltPlan selected =
        select_plan(*groups.workloads[node], selecting, BuiltPlan(*groups.plans[node]));
    if (selected.selection.kept == to_string(Strategy::kDcp)) continue;
    const PlanCandidate& kept = kept_candidate(selected.selection);
    const sim::LockstepPasses others = slowest_passes(passes, node);
    const auto joined = [&](double forward, double backward) {
      return std::max(others.forward, forward) + std::max(others.backward, backward);
    };
    // Not longer, and the node faster: nodes of like shares each shorten the step only once
    // all of them run the faster plan.
    if (joined(kept.forward_step(), kept.backward_step()) <=
            joined(passes[node].forward, passes[node].backward) &&
        kept.seconds() < node_seconds[node]) {
      passes[node] = {kept.forward_step(), kept.backward_step()};
      node_seconds[node] = kept.seconds();
      PlanOptions chosen = groups.options[node];
      chosen.strategy = parse_strategy(selected.selection.kept);
      groups.plans[node].emplace(build_one_plan(*groups.workloads[node], chosen));
      groups.plans[node]->selection = std::move(selected.selection);
    }
  }
}

}  // namespace

std::optional<NodeDeal> node_shares(const Workload& workload, const PlanOptions& options) {
  return deal_to_nodes(workload, options, balance_bound_of(workload, options), false);
}

std::optional<NodeDeal> node_shares_at_limit(const Workload& workload, const PlanOptions& options) {
  const auto limit = static_cast<double>(options.placement.max_device_tokens);
  if (limit <= balance_bound_of(workload, options)) return std::nullopt;
  return deal_to_nodes(workload, options, limit, true);
}

NodeGroups build_node_groups(const Workload& workload, const PlanOptions& options,
                             const NodeDeal& deal) {
  const ClusterShape& shape = options.cluster.shape;
  const NodeShares& shares = deal.shares;
  const auto start = Clock::now();

  // Each node's share by dcp's own search on that node: its sequences whole there, each device
  // within the deal's memory bound (the node's own mean differs from the cluster's), partials in
  // one dtype, on placements only (so that they join into one).
  const DType partial_dtype = partial_dtype_of(options, workload.shape().dtype);
  NodeGroups groups;
  groups.shares = shares;
  groups.workloads.resize(shares.size());
  groups.options.assign(shares.size(), options);
  groups.plans.resize(shares.size());
  std::vector<double> node_seconds(shares.size(), 0);
  // The nodes whose share has a sequence longer than a device's bound (where a partition may be
  // faster than the packings), and the slowest of the others, whose plans are final.
  std::vector<std::size_t> cut_nodes;
  double settled = 0;
  for (std::size_t node = 0; node < shares.size(); ++node) {
    if (shares[node].empty()) continue;
    const Workload& share = groups.workloads[node].emplace(sub_workload(workload, shares[node]));
    PlanOptions& local = groups.options[node];
    local.cluster.shape = ClusterShape{1, shape.devices_per_node};
    const double share_mean =
        static_cast<double>(share.batch().total_tokens()) / shape.devices_per_node;
    // Each device within the deal's bound; with node_balance also within eps_memory of its
    // node's own mean, as a group planned alone balances it.
    const double bound =
        deal.node_balance
            ? std::min(deal.device_bound, (1 + options.placement.eps_memory) * share_mean)
            : deal.device_bound;
    local.placement.eps_memory = std::max(0.0, bound / share_mean - 1);
    local.placement.max_device_tokens = 0;
    local.search.structured_layouts = false;
    local.search.node_groups = false;
    local.partial_dtype = partial_dtype;
    local.search.packed_layout = true;
    local.search.partitions = false;
    // A static strategy on the node: one group of its devices, at the share's own head blocks.
    local.statics.data_parallel = 1;
    local.statics.device_head_blocks = false;
    groups.plans[node].emplace(build_own(share, local));
    node_seconds[node] = kept_own(*groups.plans[node])->seconds();
    if (static_cast<double>(share.batch().max_length()) > bound) {
      cut_nodes.push_back(node);
    } else {
      settled = std::max(settled, node_seconds[node]);
    }
  }
  // Where every sequence of a share fits a device whole, its packings move nothing and were the
  // fastest of its own plans on 152 of 158 node shares of megatron, ldc and longalign batches
  // (2 to 32 nodes of 8). Where one must be cut, a partition is faster on a quarter of the shares
  // (by up to a fifth), but the partitions are most of a search's time and the nodes run in
  // lockstep: so they run on the slowest such node first, and on the next only while its packed
  // plan is slower than the slowest node so far (no faster plan of a node under that can shorten
  // the step).
  std::stable_sort(cut_nodes.begin(), cut_nodes.end(),
                   [&](std::size_t a, std::size_t b) { return node_seconds[a] > node_seconds[b]; });
  if (!options.search.partitions) cut_nodes.clear();
  for (const std::size_t node : cut_nodes) {
    if (node_seconds[node] <= settled) break;
    PlanOptions partitioned = groups.options[node];
    partitioned.search.partitions = true;
    partitioned.search.packed_layout = false;
    BuiltPlan cut = build_own(*groups.workloads[node], partitioned);
    const double seconds = kept_own(cut)->seconds();
    if (seconds < node_seconds[node]) {
      node_seconds[node] = seconds;
      groups.plans[node].emplace(std::move(cut));
    }
    settled = std::max(settled, node_seconds[node]);
  }
  if (options.strategy == Strategy::kDcp) run_static_strategies(groups, node_seconds);
  const double nodes_ms = ms_since(start);
  groups.joined.emplace(join_nodes(workload, options, groups.plans, shares));
  groups.joined->timings.partition_ms += nodes_ms;
  groups.joined->timings.total_ms += nodes_ms;
  return groups;
}

BuiltPlan node_groups_in(const Workload& workload, const PlanOptions& options,
                         const NodeGroups& groups, DType partial_dtype) {
  const auto start = Clock::now();
  std::vector<std::optional<BuiltPlan>> plans(groups.plans.size());
  for (std::size_t node = 0; node < plans.size(); ++node) {
    if (!groups.plans[node]) continue;
    const BuiltPlan& plan = *groups.plans[node];
    PlanOptions local = groups.options[node];
    local.partial_dtype = partial_dtype;
    if (plan.selection.kept == to_string(Strategy::kDcp)) {
      plans[node].emplace(build_on_placement(plan, local, partial_dtype));
    } else {
      local.strategy = parse_strategy(plan.selection.kept);
      plans[node].emplace(build_one_plan(*groups.workloads[node], local));
    }
  }
  PlanOptions joined_options = options;
  joined_options.partial_dtype = partial_dtype;
  const double nodes_ms = ms_since(start);
  BuiltPlan built = join_nodes(workload, joined_options, plans, groups.shares);
  built.timings.partition_ms += nodes_ms;
  built.timings.total_ms += nodes_ms;
  return built;
}

}  // namespace dcp::plan_search
