// SPDX-License-Identifier: Apache-2.0
// One plan of a strategy, built and timed per phase: dcp's placement, schedules and Programs, or a
// static strategy's layout and Programs.
#include "dcp/planner/plan_builder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/timing.h"

#include "dcp/model/tensor.h"

#include "dcp/planner/compile/compiler.h"
#include "dcp/planner/plan_builder_internal.h"

namespace dcp {
namespace plan_building {
namespace {

ScheduleSummary summarize(const ScheduledPass& scheduled) {
  return {scheduled.schedule.stages, scheduled.fetch_launches, scheduled.balanced,
          scheduled.estimate, scheduled.own_outputs_last};
}

// dcp's own plan on built's workload and placement, its partials travelling in `partial_dtype`:
// the header, the kv kept, both passes' schedules (timed), returned for compile_passes.
std::pair<PassSchedule, PassSchedule> schedule_passes(BuiltPlan& built, const PlanOptions& options,
                                                      DType partial_dtype) {
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
  built.forward = summarize(passes[0]);
  built.backward = summarize(passes[1]);
  return {std::move(passes[0].schedule), std::move(passes[1].schedule)};
}

// The same, and both passes' Programs (timed).
void schedule_and_compile(BuiltPlan& built, const PlanOptions& options, DType partial_dtype) {
  auto [forward, backward] = schedule_passes(built, options, partial_dtype);
  compile_passes(built, std::move(forward), std::move(backward), &built.kept);
}

}  // namespace

PlanHeader strategy_header(const Workload& workload, const PlanOptions& options) {
  return plan_header(workload, options.cluster.shape, std::string(to_string(options.strategy)),
                     options.seed, partial_dtype_of(options, workload.shape().dtype));
}

void compile_passes(BuiltPlan& built, PassSchedule forward, PassSchedule backward,
                    const KeptKv* kept) {
  const auto compile_start = Clock::now();
  // The plan promises partials reduced in a node only where both passes route them so.
  const bool reduced = forward.partial_routing == PartialRouting::kReduceInNode &&
                       backward.partial_routing == PartialRouting::kReduceInNode;
  built.plan.header.partial_routing =
      reduced ? PartialRouting::kReduceInNode : PartialRouting::kDirect;
  built.plan.forward =
      compile_pass(built.workload, built.placement, built.plan.header, forward, kept);
  built.plan.backward =
      compile_pass(built.workload, built.placement, built.plan.header, backward, kept);
  built.forward_schedule = std::move(forward);
  built.backward_schedule = std::move(backward);
  built.timings.compile_ms = ms_since(compile_start);
}

}  // namespace plan_building

using plan_building::schedule_and_compile;

DType partial_dtype_of(const PlanOptions& options, DType storage) {
  if (options.partial_dtype) return *options.partial_dtype;
  // TransformerEngine's p2p ring sends dk and dv in kv's own dtype (its dkv buffers are
  // torch.empty_like(kv)); the other systems accumulate and send them in fp32.
  return is_dcp(options.strategy) || options.strategy == Strategy::kTe ? storage : DType::kFp32;
}

double seconds_per_token(const PlanOptions& options) {
  if (!std::isfinite(options.token_flops) || options.token_flops < 0) {
    throw InvalidInput("token_flops must be a number >= 0, got " +
                       std::to_string(options.token_flops));
  }
  if (options.token_flops == 0) return 0;
  validate(options.cluster);
  return options.token_flops / options.cluster.forward_flops;
}

double token_seconds_of(const Workload& workload, const Placement& placement,
                        const PlanOptions& options) {
  const double per_token = seconds_per_token(options);
  if (per_token == 0) return 0;
  return per_token * static_cast<double>(busiest_device_tokens(workload, placement));
}

double mean_token_seconds(const Workload& workload, const PlanOptions& options) {
  return seconds_per_token(options) * static_cast<double>(workload.batch().total_tokens()) /
         options.cluster.shape.devices();
}

void validate(const PlanOptions& options) {
  validate(options.cluster);
  validate(options.schedule);
  seconds_per_token(options);  // token_flops
  if (!(options.search.screen_factor >= 1)) {
    throw InvalidInput(
        "the screen factor must be at least 1 (infinity: every candidate simulated), got " +
        std::to_string(options.search.screen_factor));
  }
  PlacementOptions placement = options.placement;  // its epsilons and token limit
  placement.cluster = options.cluster.shape;
  validate(placement);
  for (const auto& [name, value] :
       {std::pair{"the static data parallel degree", options.statics.data_parallel},
        std::pair{"the loongtrain window", options.statics.loongtrain_window}}) {
    if (value < 0) {
      throw InvalidInput(std::string(name) + " must be at least 0, got " + std::to_string(value));
    }
  }
}

double pairs_per_token_of(const Workload& workload, const PlanOptions& options) {
  if (seconds_per_token(options) == 0) return 0;
  const double pair_flops = (forward_flops(1, workload.shape(), workload.heads()) +
                             backward_flops(1, workload.shape(), workload.heads())) *
                            workload.heads().count();
  return options.token_flops / pair_flops;
}

PlacementOptions placement_options_of(const PlanOptions& options, const Workload& workload) {
  PlacementOptions placement = options.placement;
  placement.cluster = options.cluster.shape;
  placement.seed = options.seed;
  placement.pricing.kv_kept_for_backward = options.kept_kv_budget == kKeepAllKv;
  placement.pricing.partial_dtype = partial_dtype_of(options, workload.shape().dtype);
  if (const TokenCount limit = placement.max_device_tokens; limit > 0) {
    const TokenCount total = workload.batch().total_tokens();
    const std::int64_t devices = placement.cluster.devices();
    if (limit * devices < total) {
      throw InvalidInput("max_device_tokens " + std::to_string(limit) + ": " +
                         std::to_string(devices) + " devices hold at most " +
                         std::to_string(limit * devices) + " tokens, the batch has " +
                         std::to_string(total));
    }
    const double mean = static_cast<double>(total) / static_cast<double>(devices);
    placement.eps_memory = std::min(placement.eps_memory, static_cast<double>(limit) / mean - 1);
  }
  return placement;
}

BuiltPlan build_one_plan(const Workload& workload, const PlanOptions& options) {
  validate(options.cluster);
  validate(options.schedule);
  const auto start = Clock::now();
  if (is_dcp(options.strategy)) {
    const PlacementOptions placement_options = placement_options_of(options, workload);
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
  return build_static(std::move(layout), options, estimates, start);
}

ScheduledPlan schedule_at_placement(const Workload& workload, Placement placement,
                                    bool within_bounds, const PlanOptions& options) {
  validate(options.cluster);
  validate(options.schedule);
  if (!is_dcp(options.strategy)) {
    throw InvalidInput("a plan at a given placement is dcp's; the strategy is " +
                       std::string(to_string(options.strategy)));
  }
  validate(placement, workload);
  ScheduledPlan scheduled{
      BuiltPlan{Plan{}, workload, std::move(placement), within_bounds, {}, {}, {}, {}, {}, {}},
      {},
      {}};
  const auto start = Clock::now();
  std::tie(scheduled.forward, scheduled.backward) = plan_building::schedule_passes(
      scheduled.built, options, partial_dtype_of(options, workload.shape().dtype));
  scheduled.built.timings.total_ms = ms_since(start);
  return scheduled;
}

BuiltPlan compile_scheduled(ScheduledPlan scheduled) {
  BuiltPlan& built = scheduled.built;
  plan_building::compile_passes(built, std::move(scheduled.forward), std::move(scheduled.backward),
                                &built.kept);
  built.timings.total_ms += built.timings.compile_ms;
  return std::move(built);
}

BuiltPlan build_at_placement(const Workload& workload, Placement placement, bool within_bounds,
                             const PlanOptions& options) {
  return compile_scheduled(
      schedule_at_placement(workload, std::move(placement), within_bounds, options));
}

BuiltPlan build_on_placement(const BuiltPlan& placed, const PlanOptions& options,
                             DType partial_dtype) {
  BuiltPlan built{
      Plan{}, placed.workload, placed.placement, placed.placement_within_bounds, {}, {}, {}, {}, {},
      {}};
  const auto start = Clock::now();
  built.timings.partition_ms = placed.timings.partition_ms;  // the placement it reuses
  schedule_and_compile(built, options, partial_dtype);
  built.timings.total_ms = built.timings.partition_ms + ms_since(start);
  return built;
}

}  // namespace dcp
