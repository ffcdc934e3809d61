// SPDX-License-Identifier: Apache-2.0
// A structured candidate's plan: a static strategy's layout (hybrid, loongtrain) with dcp's
// routing of inputs and partials, its kept kv, and backward stages cut into parts.
#include <algorithm>
#include <cassert>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "dcp/core/timing.h"

#include "dcp/planner/compile/compiler.h"
#include "dcp/planner/plan_builder.h"
#include "dcp/planner/plan_builder_internal.h"

namespace dcp {
namespace {

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

using plan_building::compile_passes;
using plan_building::strategy_header;

StructuredVariants build_structured_variants(Strategy layout_strategy, const Workload& workload,
                                             const PlanOptions& options) {
  const auto start = Clock::now();
  validate(options.schedule);
  PlanOptions static_options = options;
  static_options.strategy = layout_strategy;
  static_options.statics.data_parallel = 1;  // dcp's plans use every device
  static_options.statics.masked_tiles = MaskedTiles::kSkip;
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
  // lower by more than noise, kEstimateGainShare); where it picks a cut, the whole stages are
  // compiled too, for the caller to simulate both (on some batches of the H200 calibration the
  // estimate's cut was the slower).
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
  compile_passes(built, std::move(layout.forward), std::move(backward), &built.kept);
  std::optional<BackwardVariant> whole_stages;
  if (whole) {
    const auto compile_start = Clock::now();
    whole_stages = BackwardVariant{
        compile_pass(built.workload, built.placement, built.plan.header, whole->first, &built.kept),
        std::move(whole->first), whole->second, 0};
    whole_stages->compile_ms = ms_since(compile_start);
  }
  built.timings.total_ms = ms_since(start);
  return {std::move(built), std::move(whole_stages)};
}

}  // namespace dcp
