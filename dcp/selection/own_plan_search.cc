// SPDX-License-Identifier: Apache-2.0
// dcp's own plan search: the block sizes of the sweep, the retries at a tighter compute balance,
// the structured layouts where a few sequences are long, and partials in fp32; the fastest under
// the simulator is kept.
#include <algorithm>
#include <bit>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/planner/model_plan_builder.h"
#include "dcp/planner/placement/static_placements.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/program/program_stats.h"
#include "dcp/selection/plan_search.h"
#include "dcp/selection/plan_search_internal.h"
#include "dcp/sim/simulator.h"

namespace dcp {
namespace plan_search {
namespace {

// Whether any Program of the plan sends a partial output (o, dq, dk, dv) to another device.
bool sends_partials(const Plan& plan) {
  for (const auto* programs : {&plan.forward, &plan.backward}) {
    for (const Program& program : *programs) {
      for (const Instruction& instruction : program.instructions) {
        const auto* launch = std::get_if<Launch>(&instruction);
        if (launch == nullptr) continue;
        for (const CommOp& op : launch->ops) {
          if (op.direction == CommOp::Direction::kSend &&
              is_output(program.slots[static_cast<std::size_t>(op.slot)].kind)) {
            return true;
          }
        }
      }
    }
  }
  return false;
}

// Whether the batch's (first) longest sequence leaves at least kDenseSequenceDensity of its pairs.
bool longest_is_dense(const Workload& workload) {
  const SequenceBatch& batch = workload.batch();
  for (SeqIndex seq = 0; seq < batch.size(); ++seq) {
    if (batch.length(seq) == batch.max_length()) {
      return workload.density(seq) >= kDenseSequenceDensity;
    }
  }
  return false;
}

// The share of a pass's bytes that are partial outputs (what fp32 partials would double).
double partial_share(const PassTraffic& traffic) {
  std::int64_t partials = 0;
  for (std::size_t kind = 0; kind < kSlotKindCount; ++kind) {
    if (is_output(static_cast<SlotKind>(kind))) {
      partials += traffic.inter_node_by_kind[kind] + traffic.intra_node_by_kind[kind];
    }
  }
  const std::int64_t total = traffic.inter_node + traffic.intra_node;
  return total == 0 ? 0.0 : static_cast<double>(partials) / static_cast<double>(total);
}

}  // namespace

const OwnCandidate* kept_own(const BuiltPlan& plan) {
  const std::vector<OwnCandidate>& tried = plan.own_candidates;
  if (tried.empty()) return nullptr;
  return &*std::min_element(tried.begin(), tried.end(),
                            [](const auto& a, const auto& b) { return a.seconds() < b.seconds(); });
}

namespace {

// Whether build_own tries the structured layouts.
bool tries_structured(const Workload& workload, const PlanOptions& options) {
  return options.search.structured_layouts && options.kept_kv_budget == kKeepAllKv &&
         few_long_sequences(workload);
}

}  // namespace

std::vector<TokenCount> searched_block_sizes(const Workload& workload, const PlanOptions& options) {
  const auto top = static_cast<TokenCount>(std::bit_ceil(
      static_cast<std::uint64_t>(std::max<TokenCount>(1, workload.batch().max_length()))));
  std::vector<TokenCount> sizes;
  for (const TokenCount size : options.search.block_sizes) {
    if (size < 1) throw InvalidInput("block size " + std::to_string(size) + " is not positive");
    const TokenCount effective = std::min(size, top);
    if (std::find(sizes.begin(), sizes.end(), effective) == sizes.end()) sizes.push_back(effective);
  }
  if (tries_structured(workload, options) && longest_is_dense(workload) &&
      std::any_of(sizes.begin(), sizes.end(),
                  [](TokenCount size) { return size >= kDenseMinBlockSize; })) {
    std::erase_if(sizes, [](TokenCount size) { return size < kDenseMinBlockSize; });
  }
  return sizes;
}

BuiltPlan build_own(const Workload& workload, const PlanOptions& options,
                    std::vector<SimulatedPlan>* runners_up) {
  if (options.search.block_sizes.empty()) return build_one_plan(workload, options);
  const std::vector<TokenCount> sizes = searched_block_sizes(workload, options);
  const bool structured = tries_structured(workload, options);
  const DType storage = workload.shape().dtype;
  std::optional<BuiltPlan> best;
  std::vector<OwnCandidate> tried;
  std::size_t kept_index = 0;
  // Whether fp32 partials may make the kept plan faster (see below), from its simulation.
  bool fp32_may_gain = false;
  // runners_up: the fastest partition at each block size.
  std::vector<SimulatedPlan> per_size;
  // `started`: when building the candidate began.
  const auto consider = [&](BuiltPlan built, OwnCandidate candidate, Clock::time_point started) {
    const sim::PlanSimulation simulation = sim::simulate(built.plan, options.cluster);
    candidate.forward_seconds = simulation.forward.seconds;
    candidate.backward_seconds = simulation.backward.seconds;
    const sim::LockstepPasses token = token_seconds_of(built, simulation, options);
    candidate.token_seconds = token.forward + token.backward;
    candidate.token_forward_seconds = token.forward;
    candidate.plan_ms = ms_since(started);
    tried.push_back(candidate);
    if (runners_up != nullptr && candidate.layout == "partition") {
      const auto same_size = std::find_if(per_size.begin(), per_size.end(), [&](const auto& entry) {
        return entry.plan.workload.blocks().block_size() == candidate.block_size;
      });
      if (same_size == per_size.end()) {
        per_size.push_back({built, candidate});
      } else if (candidate.seconds() < same_size->simulated.seconds()) {
        *same_size = {built, candidate};
      }
    }
    if (!best || candidate.seconds() < tried[kept_index].seconds()) {
      best = std::move(built);
      kept_index = tried.size() - 1;
      // The conversions fp32 would save, both passes' busiest devices', and whether in some pass
      // they take longer than what fp32 would lengthen.
      double converting = 0;
      bool outlasts_transfers = false;
      for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
        const sim::PassSimulation& simulated =
            pass == Pass::kForward ? simulation.forward : simulation.backward;
        double convert = 0;
        for (const sim::DeviceTimeline& device : simulated.devices) {
          convert = std::max(convert, device.convert_seconds);
        }
        converting += convert;
        outlasts_transfers |=
            convert > simulated.critical_transfer_seconds *
                          partial_share(pass_traffic(best->plan.header, best->plan.programs(pass)));
      }
      fp32_may_gain =
          outlasts_transfers && converting >= kFp32PartialsMinGain * candidate.seconds();
    }
  };
  const std::optional<NodeDeal> deal =
      options.search.node_groups ? node_shares(workload, options) : std::nullopt;
  // kNodeGroupsMinNodes (plan_search.h): the whole pool's partitions and best-fit packing run only
  // where the node groups do not apply, the pool is small or the deal is unbalanced.
  const bool groups_suffice = deal && options.cluster.shape.nodes >= kNodeGroupsMinNodes &&
                              deal->imbalance <= kNodeGroupsMaxImbalance;
  for (const TokenCount size : sizes) {
    if (!options.search.partitions || groups_suffice) break;
    const auto started = Clock::now();
    std::optional<Workload> cut;
    try {
      cut.emplace(reblocked(workload, size));
    } catch (const InvalidInput&) {
      // Too many blocks or tiles at this size (kMaxBatchTokens and the tile limits): a larger
      // size may still fit.
      if (size == sizes.back() && !best) throw;
      continue;
    }
    consider(build_one_plan(*cut, options), {"partition", size, storage, false}, started);
  }
  if (best && options.search.retry_tighter_balance &&
      options.placement.eps_compute > kRetryEpsCompute) {
    // The fastest kRetryPartitions partitions, fastest first (all of `tried` are partitions here).
    std::vector<OwnCandidate> fastest = tried;
    std::stable_sort(fastest.begin(), fastest.end(),
                     [](const auto& a, const auto& b) { return a.seconds() < b.seconds(); });
    fastest.resize(std::min(fastest.size(), kRetryPartitions));
    PlanOptions tighter = options;
    tighter.placement.eps_compute = kRetryEpsCompute;
    for (const OwnCandidate& partition : fastest) {
      const TokenCount size = partition.block_size;
      const auto started = Clock::now();
      BuiltPlan built = build_one_plan(reblocked(workload, size), tighter);
      if (built.placement_within_bounds) {
        consider(std::move(built), {"partition", size, storage, true}, started);
      }
    }
  }
  // The packings run at the smallest block size searched, and where the rest of the layer prices
  // every token also at half of it: the sequences they must cut then split into finer pieces,
  // which balance the devices' tokens closer (not where the node groups suffice, whose nodes'
  // searches do that).
  std::vector<TokenCount> packing_sizes;
  const TokenCount largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  if (options.search.packed_layout && !sizes.empty()) {
    const TokenCount smallest = *std::min_element(sizes.begin(), sizes.end());
    packing_sizes.push_back(smallest);
    if (options.token_flops > 0 && smallest > 1 && !groups_suffice) {
      packing_sizes.push_back(smallest / 2);
    }
  }
  for (const TokenCount size : packing_sizes) {
    auto started = Clock::now();
    std::optional<Workload> cut;
    try {
      cut.emplace(reblocked(workload, size));
    } catch (const InvalidInput&) {
      // Too many blocks at this size; the partitions above found a size that fits.
    }
    // The least-work packing's placement: where best fit places every block and unit the same,
    // its plan would be the same, and is not built again.
    std::optional<Placement> least_work;
    for (const auto& [rule, name] : {std::pair{PackingRule::kLeastWork, kPackedLayout},
                                     std::pair{PackingRule::kBestFit, kPackedBestFitLayout}}) {
      if (!cut || (groups_suffice && rule == PackingRule::kBestFit)) break;
      PackedPlacement packed = packed_placement(*cut, options.cluster.shape,
                                                placement_options_of(options, *cut).eps_memory,
                                                rule, pairs_per_token_of(*cut, options));
      if (least_work && least_work->token_block_device == packed.placement.token_block_device &&
          least_work->work_unit_device == packed.placement.work_unit_device) {
        break;
      }
      if (rule == PackingRule::kLeastWork) least_work = packed.placement;
      // The sequences it keeps whole at the largest block size searched (kept at the smallest,
      // only those it cuts need them).
      std::optional<ReblockedPlacement> whole;
      if (largest > size) whole.emplace(whole_sequences_reblocked(*cut, packed.placement, largest));
      consider(whole ? build_at_placement(whole->workload, std::move(whole->placement),
                                          packed.within_bounds, options)
                     : build_at_placement(*cut, std::move(packed.placement), packed.within_bounds,
                                          options),
               {std::string(name), size, storage, false}, started);
      started = Clock::now();
    }
  }
  // The node groups' own plans where the kept plan joins them (its fp32 retry plans them again).
  std::optional<NodeGroups> kept_groups;
  const auto consider_groups = [&](NodeGroups groups, std::string_view layout,
                                   Clock::time_point started) {
    consider(std::move(*groups.joined), {std::string(layout), 0, storage, false}, started);
    groups.joined.reset();
    if (kept_index + 1 == tried.size()) kept_groups.emplace(std::move(groups));
  };
  if (deal) {
    const auto started = Clock::now();
    consider_groups(build_node_groups(workload, options, *deal), kNodeGroupsLayout, started);
  }
  if (options.search.node_groups) {
    const auto started = Clock::now();
    if (const std::optional<NodeDeal> at_limit = node_shares_at_limit(workload, options)) {
      consider_groups(build_node_groups(workload, options, *at_limit), kNodeGroupsAtLimitLayout,
                      started);
    }
  }
  if (structured) {
    for (const Strategy layout : kStructuredLayouts) {
      const auto started = Clock::now();
      std::optional<BuiltPlan> built;
      try {
        built.emplace(build_structured(layout, workload, options));
      } catch (const InvalidInput&) {
        continue;  // the layout cannot run on the cluster (e.g. hybrid with too few heads)
      }
      consider(std::move(*built), {std::string(to_string(layout)), 0, storage, false}, started);
    }
  }
  if (!best) {
    throw InvalidInput(
        "dcp's own search tried no plan: no partitions, and no other layout that "
        "fits the batch at block sizes " +
        std::to_string(sizes.empty() ? 0 : sizes.front()) + " and up");
  }
  // Narrow partials halve their bytes but cost a conversion kernel on each side of every launch
  // that moves them; where a pass is compute-bound that costs more than the bytes save. So the
  // fastest plan is also tried with partials in fp32 (its placement kept), unless the dtype was
  // asked for, or its busiest devices' conversions over both passes take less than
  // kFp32PartialsMinGain of its time, or in no pass longer than the part of the pass's
  // critical-path transfers that fp32 lengthens: those transfers times the pass's share of partial
  // bytes (partial_share). (Against the whole critical transfers, the retry would be skipped on
  // batches where it wins, docs/scheduling.md.)
  if (!options.partial_dtype && storage != DType::kFp32 && fp32_may_gain &&
      sends_partials(best->plan)) {
    const auto started = Clock::now();
    OwnCandidate fp32 = tried[kept_index];
    fp32.partial_dtype = DType::kFp32;
    if (fp32.layout == kNodeGroupsLayout || fp32.layout == kNodeGroupsAtLimitLayout) {
      // Each node's plan in fp32, keeping its own schedules (or its static strategy's).
      consider(node_groups_in(workload, options, *kept_groups, DType::kFp32), fp32, started);
    } else if (fp32.layout == "partition" || fp32.layout == kPackedLayout ||
               fp32.layout == kPackedBestFitLayout) {
      consider(build_on_placement(*best, options, DType::kFp32), fp32, started);
    } else {
      PlanOptions fp32_options = options;
      fp32_options.partial_dtype = DType::kFp32;
      consider(build_structured(parse_strategy(fp32.layout), workload, fp32_options), fp32,
               started);
    }
  }
  best->own_candidates = std::move(tried);
  if (runners_up != nullptr) {
    const OwnCandidate& kept = best->own_candidates[kept_index];
    std::erase_if(per_size, [&](const auto& entry) {
      return kept.layout == "partition" &&
             entry.plan.workload.blocks().block_size() == kept.block_size;
    });
    std::stable_sort(per_size.begin(), per_size.end(), [](const auto& a, const auto& b) {
      return a.simulated.seconds() < b.simulated.seconds();
    });
    for (auto& entry : per_size) runners_up->push_back(std::move(entry));
  }
  return std::move(*best);
}

}  // namespace plan_search

bool few_long_sequences(const Workload& workload) {
  const SequenceBatch& batch = workload.batch();
  if (batch.size() > kStructuredMaxSequences) return false;
  return 2 * batch.max_length() >= batch.total_tokens() ||
         (batch.size() <= kStructuredDenseMaxSequences && plan_search::longest_is_dense(workload));
}

}  // namespace dcp
