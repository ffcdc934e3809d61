// SPDX-License-Identifier: Apache-2.0
// The whole planner, timed per phase.
#include "dcp/planner/plan_builder.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/planner/compile/compiler.h"
#include "dcp/program/program_stats.h"
#include "dcp/sim/simulator.h"

namespace dcp {
namespace {

// The header options.strategy's plan of `workload` has (its values' sizes for the estimates).
PlanHeader strategy_header(const Workload& workload, const PlanOptions& options) {
  return plan_header(workload, options.cluster.shape, std::string(to_string(options.strategy)),
                     options.seed, partial_dtype_of(options, workload.shape().dtype));
}

ScheduleSummary summarize(const ScheduledPass& scheduled) {
  return {scheduled.schedule.stages, scheduled.fetch_launches, scheduled.balanced,
          scheduled.estimate, scheduled.own_outputs_last};
}

// Both passes' Programs from their schedules, on built's workload, placement and header (timed).
void compile_passes(BuiltPlan& built, const PassSchedule& forward, const PassSchedule& backward,
                    const KeptKv* kept) {
  const auto compile_start = Clock::now();
  built.plan.forward =
      compile_pass(built.workload, built.placement, built.plan.header, forward, kept);
  built.plan.backward =
      compile_pass(built.workload, built.placement, built.plan.header, backward, kept);
  built.timings.compile_ms = ms_since(compile_start);
}

BuiltPlan compile_static(StaticPlan layout, const PlanOptions& options, Clock::time_point start,
                         const PassEstimates& estimates);

StaticOptions static_options_of(const PlanOptions& options) {
  StaticOptions static_options;
  static_options.masked_tiles = options.masked_tiles;
  static_options.data_parallel = options.static_data_parallel;
  static_options.loongtrain_window = options.loongtrain_window;
  return static_options;
}

// dcp's own plan on built's workload and placement, its partials travelling in `partial_dtype`:
// the header, the kv kept, both passes' schedules and Programs (timed).
void schedule_and_compile(BuiltPlan& built, const PlanOptions& options, DType partial_dtype) {
  built.plan.header =
      plan_header(built.workload, options.cluster.shape, std::string(to_string(options.strategy)),
                  options.seed, partial_dtype);
  built.kept =
      choose_kept_kv(built.workload, built.placement, built.plan.header, options.kept_kv_budget);
  ScheduledPass passes[2];
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    const auto begin = Clock::now();
    passes[pass == Pass::kForward ? 0 : 1] =
        schedule_pass(built.workload, built.placement, options.cluster, built.plan.header, pass,
                      options.schedule, &built.kept);
    (pass == Pass::kForward ? built.timings.schedule_forward_ms
                            : built.timings.schedule_backward_ms) = ms_since(begin);
  }
  compile_passes(built, passes[0].schedule, passes[1].schedule, &built.kept);
  built.forward = summarize(passes[0]);
  built.backward = summarize(passes[1]);
}

BuiltPlan build_one(const Workload& workload, const PlanOptions& options) {
  const auto start = Clock::now();
  if (is_dcp(options.strategy)) {
    PlacementOptions placement_options = options.placement;
    placement_options.cluster = options.cluster.shape;
    placement_options.seed = options.seed;
    placement_options.pricing.kv_kept_for_backward = options.kept_kv_budget == kKeepAllKv;
    placement_options.pricing.partial_dtype = partial_dtype_of(options, workload.shape().dtype);
    PlacementResult placed = place(workload, placement_options);
    BuiltPlan built{
        Plan{}, workload, std::move(placed.placement), placed.within_bounds, {}, {}, {}, {},
        {},     {}};
    built.timings.partition_ms = ms_since(start);
    schedule_and_compile(built, options, placement_options.pricing.partial_dtype);
    built.timings.total_ms = ms_since(start);
    return built;
  }
  PassEstimates estimates;
  StaticPlan layout = static_layout(workload, options, &estimates);
  return compile_static(std::move(layout), options, start, estimates);
}

BuiltPlan compile_static(StaticPlan layout, const PlanOptions& options, Clock::time_point start,
                         const PassEstimates& estimates) {
  BuiltPlan built{
      Plan{}, std::move(layout.workload), std::move(layout.placement), true, {}, {}, {}, {}, {},
      {}};
  built.data_parallel = layout.data_parallel;
  built.timings.partition_ms = ms_since(start);
  built.plan.header = strategy_header(built.workload, options);
  compile_passes(built, layout.forward, layout.backward, nullptr);
  built.forward = {layout.forward.stages, 0, false, estimates.forward};
  built.backward = {layout.backward.stages, 0, false, estimates.backward};
  built.timings.total_ms = ms_since(start);
  return built;
}

PlanCandidate simulated(const BuiltPlan& built, std::string strategy, const ClusterSpec& cluster) {
  const sim::PlanSimulation simulation = sim::simulate(built.plan, cluster);
  return {std::move(strategy),        true, "", true, 0, simulation.forward.seconds,
          simulation.backward.seconds};
}

// The workload with every sequence cut into blocks of `block_size` tokens.
Workload reblocked(const Workload& workload, TokenCount block_size) {
  std::vector<SequenceMask> masks;
  masks.reserve(static_cast<std::size_t>(workload.batch().size()));
  for (SeqIndex seq = 0; seq < workload.batch().size(); ++seq) masks.push_back(workload.mask(seq));
  return Workload(workload.shape(), workload.batch(), std::move(masks), block_size,
                  workload.heads().head_block_size());
}

// Each device's work units of each stage s >= 1 of `schedule`, sorted by kv value (then q block),
// with their unmasked pairs: what split_stages cuts, computed once for every number of parts.
// Indexed [stage * devices + device].
using StageUnits = std::vector<std::vector<std::pair<WorkUnitId, PairCount>>>;

StageUnits units_by_kv(const Workload& workload, const Placement& placement,
                       const PassSchedule& schedule) {
  const auto devices = static_cast<std::size_t>(placement.cluster.devices());
  std::vector<std::vector<std::tuple<ValueKey, LocalBlockIndex, WorkUnitId, PairCount>>> sorted(
      devices * static_cast<std::size_t>(schedule.stages));
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    const auto stage = static_cast<std::size_t>(schedule.unit_stage[static_cast<std::size_t>(w)]);
    if (stage == 0) continue;
    const auto device =
        static_cast<std::size_t>(placement.work_unit_device[static_cast<std::size_t>(w)]);
    const WorkUnit unit = workload.work_unit(w);
    sorted[stage * devices + device].emplace_back(key_value(workload, unit), unit.q_block, w,
                                                  unit.pairs);
  }
  StageUnits units(sorted.size());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    std::sort(sorted[i].begin(), sorted[i].end());
    units[i].reserve(sorted[i].size());
    for (const auto& [kv, q_block, w, pairs] : sorted[i]) units[i].emplace_back(w, pairs);
  }
  return units;
}

// Cuts every stage s >= 1 of `schedule` into `parts` stages: each device's units of the stage, in
// `units` order, split by unmasked pairs into consecutive parts. The kv gradients a part finishes
// can then be reduced and sent while the next parts compute, instead of after the whole stage
// (add_partial_transfers sends a node's merge only after the other devices' last contributions to
// it have arrived). `schedule` has no partial transfers yet and all its input transfers are in
// launch 0, so its stages may be renumbered freely.
void split_stages(const StageUnits& units, PassSchedule& schedule, std::int32_t parts) {
  assert(std::all_of(schedule.transfers.begin(), schedule.transfers.end(),
                     [](const Transfer& t) { return t.launch == 0 && !is_output(t.value.kind); }));
  const std::size_t devices = units.size() / static_cast<std::size_t>(schedule.stages);
  for (std::size_t i = devices; i < units.size(); ++i) {
    const auto stage = static_cast<std::int32_t>(i / devices);
    double total = 0;
    for (const auto& [w, pairs] : units[i]) total += static_cast<double>(pairs);
    double done = 0;
    for (const auto& [w, pairs] : units[i]) {
      // The part holding the unit's middle pair.
      const auto part =
          std::clamp(static_cast<std::int32_t>((done + static_cast<double>(pairs) / 2) /
                                               std::max(1.0, total) * parts),
                     0, parts - 1);
      schedule.unit_stage[static_cast<std::size_t>(w)] = 1 + (stage - 1) * parts + part;
      done += static_cast<double>(pairs);
    }
  }
  schedule.stages = 1 + (schedule.stages - 1) * parts;
}

// A static layout's schedule's inputs as dcp moves them: no partial outputs yet (the caller routes
// them dcp's way, add_partial_transfers), and, with `kept` (backward), no kv transfer that keeping
// makes unnecessary: none to a device that keeps the value, then (until none is left) none to a
// device that neither reads the value nor passes it on. If the inputs left all come from their
// owners, they all go in launch 0 and stages 1.. run in reverse order (see below), and the stages
// are free to be cut (split_stages): returns whether they are.
bool route_inputs_dcps_way(const Workload& workload, const Placement& placement,
                           PassSchedule& schedule, const KeptKv* kept) {
  std::erase_if(schedule.transfers, [](const Transfer& t) { return is_output(t.value.kind); });
  if (kept == nullptr) return false;
  const auto keeps = [&](DeviceId d, const ValueKey& v) {
    const auto& list = kept->per_device[static_cast<std::size_t>(d)];
    return std::binary_search(list.begin(), list.end(),
                              KeptValue{SlotKind::kKV, v.block, v.head_block});
  };
  std::set<std::pair<DeviceId, ValueKey>> reads;
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    reads.insert({placement.work_unit_device[static_cast<std::size_t>(w)],
                  key_value(workload, workload.work_unit(w))});
  }
  std::erase_if(schedule.transfers, [&](const Transfer& t) {
    return t.value.kind == SlotKind::kKV && keeps(t.dst, t.value);
  });
  while (true) {
    std::set<std::pair<DeviceId, ValueKey>> sends;
    for (const Transfer& t : schedule.transfers) {
      if (t.value.kind == SlotKind::kKV) sends.insert({t.src, t.value});
    }
    const std::size_t before = schedule.transfers.size();
    std::erase_if(schedule.transfers, [&](const Transfer& t) {
      return t.value.kind == SlotKind::kKV && !reads.contains({t.dst, t.value}) &&
             !sends.contains({t.dst, t.value});
    });
    if (schedule.transfers.size() == before) break;
  }
  // Every kv value is on its reader from stage 0 on: stages 1.. may run in any order. The ring
  // reaches the farthest kv last, whose partials then cross nodes after the last stage; run them
  // first instead, so that their partials travel while the nearer ones compute.
  const bool inputs_from_owners =
      std::all_of(schedule.transfers.begin(), schedule.transfers.end(), [&](const Transfer& t) {
        return placement.token_block_device[static_cast<std::size_t>(t.value.block)] == t.src;
      });
  if (!inputs_from_owners) return false;
  for (std::int32_t& stage : schedule.unit_stage) {
    if (stage > 0) stage = schedule.stages - stage;
  }
  for (Transfer& t : schedule.transfers) t.launch = 0;
  return true;
}

}  // namespace

BuiltPlan build_structured(Strategy layout_strategy, const Workload& workload,
                           const PlanOptions& options) {
  const auto start = Clock::now();
  validate(options.schedule);
  PlanOptions static_options = options;
  static_options.strategy = layout_strategy;
  static_options.static_data_parallel = 1;  // dcp's plans use every device
  static_options.masked_tiles = MaskedTiles::kSkip;
  StaticPlan layout = static_layout(workload, static_options);
  BuiltPlan built{
      Plan{}, std::move(layout.workload), std::move(layout.placement), true, {}, {}, {}, {}, {},
      {}};
  built.plan.header = strategy_header(built.workload, options);
  built.kept = choose_kept_kv(built.workload, built.placement, built.plan.header, kKeepAllKv);
  // Each pass with its last stage's own outputs last where the estimate finds that faster. (The
  // units of the first ring step that need nothing from the all-to-all do not run in stage 0,
  // while it travels: the shorter first step would leave less time to hide the next step's kv.)
  const auto finish = [&](PassSchedule& schedule, ScheduleSummary& summary) {
    summary.estimate =
        estimate(built.workload, built.placement, options.cluster, built.plan.header, schedule);
    summary.own_outputs_last =
        options.schedule.own_outputs_last &&
        keep_own_outputs_last_if_faster(built.workload, built.placement, options.cluster,
                                        built.plan.header, schedule, summary.estimate,
                                        schedule.stages - 1);
    summary.stages = schedule.stages;
  };
  route_inputs_dcps_way(built.workload, built.placement, layout.forward, nullptr);
  add_partial_transfers(built.workload, built.placement, layout.forward,
                        PartialRouting::kReduceInNode);
  finish(layout.forward, built.forward);
  // The backward pass with each stage cut into parts where its inputs all come from their owners
  // (split_stages): as many as asked, or else 1, 2 or 4. A layout of few long stages (hybrid's ring
  // of four nodes) otherwise sends a stage's kv gradients across nodes only after the next stage,
  // and at the end those of the last remote one. The estimate picks the parts (a cut only where
  // lower by more than noise, kEstimateGainShare); where it picks a cut, the cut and the whole
  // stages are both compiled and simulated and the faster kept, the whole on a tie (on some
  // batches of the H200 calibration the estimate's cut was the slower). That choice is timed as
  // the backward pass's scheduling.
  const std::int32_t asked = options.schedule.structured_stage_parts;
  const bool cuttable =
      route_inputs_dcps_way(built.workload, built.placement, layout.backward, &built.kept) &&
      layout.backward.stages > 1;
  const StageUnits units =
      cuttable ? units_by_kv(built.workload, built.placement, layout.backward) : StageUnits{};
  const auto backward_in_parts = [&](std::int32_t parts, ScheduleSummary& summary) {
    PassSchedule schedule = layout.backward;
    summary.stage_parts = cuttable ? parts : 1;
    if (summary.stage_parts > 1) split_stages(units, schedule, parts);
    add_partial_transfers(built.workload, built.placement, schedule, PartialRouting::kReduceInNode);
    finish(schedule, summary);
    return schedule;
  };
  PassSchedule backward = backward_in_parts(std::max(asked, 1), built.backward);
  std::optional<std::pair<PassSchedule, ScheduleSummary>> whole;
  if (asked == 0 && cuttable) {
    for (const std::int32_t parts : {2, 4}) {
      ScheduleSummary summary;
      PassSchedule cut = backward_in_parts(parts, summary);
      if (summary.estimate.seconds < built.backward.estimate.seconds * kEstimateGainShare) {
        if (!whole) whole.emplace(std::move(backward), built.backward);
        backward = std::move(cut);
        built.backward = summary;
      }
    }
  }
  built.timings.partition_ms = ms_since(start);
  compile_passes(built, layout.forward, backward, &built.kept);
  if (whole) {
    const auto choice_start = Clock::now();
    std::vector<Program> programs =
        compile_pass(built.workload, built.placement, built.plan.header, whole->first, &built.kept);
    if (sim::simulate(built.plan.header, programs, options.cluster).seconds <=
        sim::simulate(built.plan.header, built.plan.backward, options.cluster).seconds) {
      built.plan.backward = std::move(programs);
      built.backward = whole->second;
    }
    built.timings.schedule_backward_ms = ms_since(choice_start);
  }
  built.timings.total_ms = ms_since(start);
  return built;
}

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

// dcp's own plan: on the workload's blocks, or the fastest under the simulator of those at
// options.block_sizes (its own_candidates then hold every candidate's simulated times).
BuiltPlan build_own(const Workload& workload, const PlanOptions& options) {
  if (options.block_sizes.empty()) return build_one(workload, options);
  const auto top = static_cast<TokenCount>(std::bit_ceil(
      static_cast<std::uint64_t>(std::max<TokenCount>(1, workload.batch().max_length()))));
  std::vector<TokenCount> sizes;
  for (const TokenCount size : options.block_sizes) {
    if (size < 1) throw InvalidInput("block size " + std::to_string(size) + " is not positive");
    const TokenCount effective = std::min(size, top);
    if (std::find(sizes.begin(), sizes.end(), effective) == sizes.end()) sizes.push_back(effective);
  }
  const bool structured = options.structured_layouts && options.kept_kv_budget == kKeepAllKv &&
                          few_long_sequences(workload);
  if (structured && longest_is_dense(workload) &&
      std::any_of(sizes.begin(), sizes.end(),
                  [](TokenCount size) { return size >= kDenseMinBlockSize; })) {
    std::erase_if(sizes, [](TokenCount size) { return size < kDenseMinBlockSize; });
  }
  const DType storage = workload.shape().dtype;
  std::optional<BuiltPlan> best;
  std::vector<OwnCandidate> tried;
  std::size_t kept_index = 0;
  // Whether fp32 partials may make the kept plan faster (see below), from its simulation.
  bool fp32_may_gain = false;
  const auto consider = [&](BuiltPlan built, OwnCandidate candidate) {
    const sim::PlanSimulation simulation = sim::simulate(built.plan, options.cluster);
    candidate.forward_seconds = simulation.forward.seconds;
    candidate.backward_seconds = simulation.backward.seconds;
    tried.push_back(candidate);
    if (!best || candidate.seconds() < tried[kept_index].seconds()) {
      best = std::move(built);
      kept_index = tried.size() - 1;
      fp32_may_gain = false;
      for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
        const sim::PassSimulation& simulated =
            pass == Pass::kForward ? simulation.forward : simulation.backward;
        double convert = 0;
        for (const sim::DeviceTimeline& device : simulated.devices) {
          convert = std::max(convert, device.convert_seconds);
        }
        fp32_may_gain |=
            convert >= kFp32PartialsMinGain * candidate.seconds() &&
            convert > simulated.critical_transfer_seconds *
                          partial_share(pass_traffic(best->plan.header, best->plan.programs(pass)));
      }
    }
  };
  for (const TokenCount size : sizes) {
    std::optional<Workload> cut;
    try {
      cut.emplace(reblocked(workload, size));
    } catch (const InvalidInput&) {
      // Too many blocks or tiles at this size (kMaxBatchTokens and the tile limits): a larger
      // size may still fit.
      if (size == sizes.back() && !best) throw;
      continue;
    }
    consider(build_one(*cut, options), {"partition", size, storage, false, 0, 0});
  }
  if (best && options.retry_tighter_balance && options.placement.eps_compute > kRetryEpsCompute) {
    // The fastest kRetryPartitions partitions, fastest first (all of `tried` are partitions here).
    std::vector<OwnCandidate> fastest = tried;
    std::stable_sort(fastest.begin(), fastest.end(),
                     [](const auto& a, const auto& b) { return a.seconds() < b.seconds(); });
    fastest.resize(std::min(fastest.size(), kRetryPartitions));
    PlanOptions tighter = options;
    tighter.placement.eps_compute = kRetryEpsCompute;
    for (const OwnCandidate& partition : fastest) {
      const TokenCount size = partition.block_size;
      BuiltPlan built = build_one(reblocked(workload, size), tighter);
      if (built.placement_within_bounds) {
        consider(std::move(built), {"partition", size, storage, true, 0, 0});
      }
    }
  }
  if (structured) {
    for (const Strategy layout : kStructuredLayouts) {
      std::optional<BuiltPlan> built;
      try {
        built.emplace(build_structured(layout, workload, options));
      } catch (const InvalidInput&) {
        continue;  // the layout cannot run on the cluster (e.g. hybrid with too few heads)
      }
      consider(std::move(*built), {std::string(to_string(layout)), 0, storage, false, 0, 0});
    }
  }
  // Narrow partials halve their bytes but cost a conversion kernel on each side of every launch
  // that moves them; where a pass is compute-bound that costs more than the bytes save. So the
  // fastest plan is also tried with partials in fp32 (its placement kept), unless the dtype was
  // asked for, or in no pass its busiest device's conversions take both kFp32PartialsMinGain of
  // its time and longer than the part of the pass's critical-path transfers that fp32 lengthens:
  // those transfers times the pass's share of partial bytes (partial_share). (Against the whole
  // critical transfers, the retry would be skipped on batches where it wins, docs/scheduling.md.)
  if (!options.partial_dtype && storage != DType::kFp32 && fp32_may_gain &&
      sends_partials(best->plan)) {
    OwnCandidate fp32 = tried[kept_index];
    fp32.partial_dtype = DType::kFp32;
    if (fp32.layout == "partition") {
      BuiltPlan built{Plan{},
                      best->workload,
                      best->placement,
                      best->placement_within_bounds,
                      {},
                      {},
                      {},
                      {},
                      {},
                      {}};
      const auto start = Clock::now();
      built.timings.partition_ms = best->timings.partition_ms;  // the placement it reuses
      schedule_and_compile(built, options, DType::kFp32);
      built.timings.total_ms = built.timings.partition_ms + ms_since(start);
      consider(std::move(built), fp32);
    } else {
      PlanOptions fp32_options = options;
      fp32_options.partial_dtype = DType::kFp32;
      consider(build_structured(parse_strategy(fp32.layout), workload, fp32_options), fp32);
    }
  }
  best->own_candidates = std::move(tried);
  return std::move(*best);
}

}  // namespace

bool few_long_sequences(const Workload& workload) {
  const SequenceBatch& batch = workload.batch();
  if (batch.size() > kStructuredMaxSequences) return false;
  return 2 * batch.max_length() >= batch.total_tokens() ||
         (batch.size() <= kStructuredDenseMaxSequences && longest_is_dense(workload));
}

PassEstimates static_plan_estimate(const StaticPlan& layout, const PlanOptions& options) {
  const PlanHeader header = strategy_header(layout.workload, options);
  return {estimate(layout.workload, layout.placement, options.cluster, header, layout.forward),
          estimate(layout.workload, layout.placement, options.cluster, header, layout.backward)};
}

double static_plan_lower_bound(const Workload& workload, const PlanOptions& options) {
  return static_estimate_lower_bound(options.strategy, workload, options.cluster,
                                     static_options_of(options),
                                     strategy_header(workload, options));
}

StaticPlan static_layout(const Workload& workload, const PlanOptions& options,
                         PassEstimates* estimates) {
  StaticPlan plan =
      static_plan(options.strategy, workload, options.cluster.shape, static_options_of(options));
  // A double ring's outer hops: in the round's first launch (static_plan's), or spread over the
  // round's launches, per pass whichever the estimate finds faster (spread_outer_hops).
  const bool double_ring = plan.ring.window > 1 && plan.ring.window < plan.ring.ring_size();
  if (!double_ring) {
    if (estimates != nullptr) *estimates = static_plan_estimate(plan, options);
    return plan;
  }
  const PlanHeader header = strategy_header(plan.workload, options);
  PassEstimates kept;
  for (const auto& [schedule, kept_estimate] :
       {std::pair{&plan.forward, &kept.forward}, std::pair{&plan.backward, &kept.backward}}) {
    *kept_estimate = estimate(plan.workload, plan.placement, options.cluster, header, *schedule);
    PassSchedule other = spread_outer_hops(plan.workload, plan.placement, plan.ring, *schedule);
    ScheduleEstimate other_estimate =
        estimate(plan.workload, plan.placement, options.cluster, header, other);
    if (other_estimate.seconds < kept_estimate->seconds) {
      *schedule = std::move(other);
      *kept_estimate = std::move(other_estimate);
    }
  }
  if (estimates != nullptr) *estimates = std::move(kept);
  return plan;
}

BuiltPlan build_static(StaticPlan layout, const PlanOptions& options,
                       const PassEstimates& estimates) {
  return compile_static(std::move(layout), options, Clock::now(), estimates);
}

DType partial_dtype_of(const PlanOptions& options, DType storage) {
  if (options.partial_dtype) return *options.partial_dtype;
  // TransformerEngine's p2p ring sends dk and dv in kv's own dtype (its dkv buffers are
  // torch.empty_like(kv)); the other systems accumulate and send them in fp32.
  return is_dcp(options.strategy) || options.strategy == Strategy::kTe ? storage : DType::kFp32;
}

namespace {

// kDcp's selection from dcp's own plan `best`, as build_own made it.
BuiltPlan select_static(const Workload& workload, const PlanOptions& options, BuiltPlan best,
                        Clock::time_point start) {
  const std::vector<OwnCandidate> own_candidates = best.own_candidates;
  const auto select_start = Clock::now();
  PlanSelection selection;
  if (own_candidates.empty()) {  // one block size: not simulated yet
    selection.candidates.push_back(simulated(best, "dcp", options.cluster));
  } else {  // the kept one: the first fastest
    const auto kept =
        std::min_element(own_candidates.begin(), own_candidates.end(),
                         [](const auto& a, const auto& b) { return a.seconds() < b.seconds(); });
    selection.candidates.push_back(
        {"dcp", true, "", true, 0, kept->forward_seconds, kept->backward_seconds});
  }
  double best_seconds = selection.candidates.front().seconds();
  for (const Strategy strategy : kStaticStrategies) {
    PlanOptions static_options = options;
    static_options.strategy = strategy;
    const std::string name(to_string(strategy));
    const auto static_start = Clock::now();
    // Screen from the strategy's structure first: a bound of its estimate needs no layout.
    double bound = 0;
    try {
      bound = static_plan_lower_bound(workload, static_options);
    } catch (const InvalidInput& e) {
      selection.candidates.push_back({name, false, e.what(), false, 0, 0, 0});
      continue;
    }
    if (bound >= kScreenFactor * best_seconds) {
      PlanCandidate screened{name, true, "", false, bound, 0, 0};
      screened.bounded = true;
      selection.candidates.push_back(screened);
      continue;
    }
    std::optional<StaticPlan> layout;
    PassEstimates estimates;
    try {
      layout.emplace(static_layout(workload, static_options, &estimates));
    } catch (const InvalidInput& e) {
      selection.candidates.push_back({name, false, e.what(), false, 0, 0, 0});
      continue;
    }
    // Screen: a static plan whose schedule estimate is far above dcp's simulated time is not
    // compiled and simulated (docs/cost_model.md; the estimate is within a few percent of the
    // simulation for static plans, whose time is transfers and whole-tile kernels).
    const double estimated = estimates.seconds();
    if (estimated >= kScreenFactor * best_seconds) {
      selection.candidates.push_back({name, true, "", false, estimated, 0, 0});
      continue;
    }
    BuiltPlan candidate =
        compile_static(std::move(*layout), static_options, static_start, estimates);
    PlanCandidate simulated_candidate = simulated(candidate, name, options.cluster);
    simulated_candidate.estimate_seconds = estimated;
    selection.candidates.push_back(simulated_candidate);
    if (simulated_candidate.seconds() < best_seconds) {
      best_seconds = simulated_candidate.seconds();
      selection.kept = name;
      best = std::move(candidate);
      best.plan.header.strategy = "dcp/" + name;
    }
  }
  selection.simulate_ms = ms_since(select_start);
  best.selection = std::move(selection);
  best.own_candidates = own_candidates;
  best.timings.total_ms = ms_since(start);
  return best;
}

}  // namespace

BuiltPlan build_plan(const Workload& workload, const PlanOptions& options) {
  validate(options.cluster);
  // Here, so that build_own cannot take a bad option for a layout that cannot run.
  validate(options.schedule);
  if (!is_dcp(options.strategy)) return build_one(workload, options);
  const auto start = Clock::now();
  BuiltPlan best = build_own(workload, options);
  if (options.strategy == Strategy::kDcpPure) {
    best.timings.total_ms = ms_since(start);
    return best;
  }
  return select_static(workload, options, std::move(best), start);
}

BuiltPlan select_plan(const Workload& workload, const PlanOptions& options, BuiltPlan own) {
  if (options.strategy != Strategy::kDcp) {
    throw InvalidInput("select_plan is dcp's selection; the options name " +
                       std::string(to_string(options.strategy)));
  }
  validate(options.cluster);
  const auto start = Clock::now();
  own.plan.header.strategy = std::string(to_string(Strategy::kDcp));
  return select_static(workload, options, std::move(own), start);
}

}  // namespace dcp
