// SPDX-License-Identifier: Apache-2.0
// One plan of each strategy: it verifies on every mask kind and world size, plans are
// deterministic and survive the plan file, and the verifier catches broken compiled plans.
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_spec.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/program/plan_file/plan_file.h"
#include "dcp/program/plan_json.h"
#include "dcp/program/program_stats.h"
#include "dcp/program/verifier/verifier.h"

#include "tests/testing/plan_fixtures.h"

namespace dcp {
namespace {

using testing::a100_plan_options;
using testing::random_batch;
using testing::small_spec;
using testing::small_workload;

// dcp's placement of `workload` on options' cluster (options.placement's settings), as the stage
// scheduler's tests schedule it.
Placement dcp_placement(const Workload& workload, const PlanOptions& options) {
  PlacementOptions placement_options = options.placement;
  placement_options.cluster = options.cluster.shape;
  return place(workload, placement_options).placement;
}

class EveryStrategyAndWorld : public ::testing::TestWithParam<std::tuple<Strategy, ClusterShape>> {
};

TEST_P(EveryStrategyAndWorld, VerifiesOnEveryMaskBothPasses) {
  const auto [strategy, world] = GetParam();
  std::uint64_t seed = 11;
  for (const MaskKind kind : all_mask_kinds()) {
    // Ulysses splits heads over all devices: give it as many q heads as it needs.
    const std::int32_t q_heads = strategy == Strategy::kUlysses && world.devices() > 8 ? 32 : 8;
    const Workload workload =
        small_workload(random_batch(seed++, world.devices()), kind, q_heads, q_heads / 4);
    const BuiltPlan built = build_one_plan(workload, a100_plan_options(strategy, world));
    const VerifyReport report = verify(built.plan);
    ASSERT_TRUE(report.ok) << to_string(kind) << ": " << describe(report);
    EXPECT_EQ(report.forward.work_units, built.workload.work_unit_count());
    EXPECT_EQ(report.backward.work_units, built.workload.work_unit_count());
    EXPECT_EQ(built.plan.forward.size(), static_cast<std::size_t>(world.devices()));
    EXPECT_EQ(built.plan.backward.size(), static_cast<std::size_t>(world.devices()));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, EveryStrategyAndWorld,
    ::testing::Combine(::testing::Values(Strategy::kDcpPure, Strategy::kRing, Strategy::kZigzag,
                                         Strategy::kUlysses, Strategy::kHybrid, Strategy::kTe,
                                         Strategy::kLoongTrain),
                       ::testing::Values(ClusterShape{1, 1}, ClusterShape{1, 2}, ClusterShape{1, 3},
                                         ClusterShape{2, 2}, ClusterShape{2, 4},
                                         ClusterShape{4, 8})),
    [](const auto& param_info) {
      const ClusterShape world = std::get<1>(param_info.param);
      std::string name(to_string(std::get<0>(param_info.param)));
      std::replace(name.begin(), name.end(), '-', '_');
      return name + "_" + std::to_string(world.nodes) + "x" +
             std::to_string(world.devices_per_node);
    });

TEST(PlanBuilder, UlyssesNeedsAHeadBlockPerDevice) {
  const Workload workload = small_workload(random_batch(1), MaskKind::kCausal, 8, 2);
  EXPECT_THROW(build_one_plan(workload, a100_plan_options(Strategy::kUlysses, {1, 16})),
               InvalidInput);
  EXPECT_THROW(build_one_plan(workload, a100_plan_options(Strategy::kHybrid, {2, 16})),
               InvalidInput);
}

TEST(PlanBuilder, SameInputsAndSeedGiveTheSameBytes) {
  const Workload workload = small_workload(random_batch(3), MaskKind::kLambda, 8, 2);
  for (const Strategy strategy : {Strategy::kDcp, Strategy::kZigzag, Strategy::kHybrid}) {
    const std::string a =
        serialize_plan(build_one_plan(workload, a100_plan_options(strategy, {2, 4})).plan);
    const std::string b =
        serialize_plan(build_one_plan(workload, a100_plan_options(strategy, {2, 4})).plan);
    EXPECT_EQ(a, b) << to_string(strategy);
  }
}

TEST(PlanBuilder, AStaticPlanBuiltInStepsIsTheOneBuiltWhole) {
  const Workload workload = small_workload(random_batch(5), MaskKind::kCausal, 8, 2);
  for (const Strategy strategy : {Strategy::kZigzag, Strategy::kTe, Strategy::kLoongTrain}) {
    PlanOptions options = a100_plan_options(strategy, {2, 4});
    if (strategy == Strategy::kLoongTrain) options.statics.loongtrain_window = 1;
    const BuiltPlan whole = build_one_plan(workload, options);
    StaticPlan layout = static_layout(workload, options);
    const PassEstimates estimates = static_plan_estimate(layout, options);
    EXPECT_NEAR(estimates.seconds(),
                whole.forward.estimate.seconds + whole.backward.estimate.seconds, 1e-12)
        << to_string(strategy);
    const BuiltPlan stepped = build_static(std::move(layout), options, estimates);
    EXPECT_EQ(serialize_plan(stepped.plan), serialize_plan(whole.plan)) << to_string(strategy);
  }
}

TEST(PlanBuilder, ADcpPlanScheduledThenCompiledIsTheOneBuiltWhole) {
  const Workload workload = small_workload(random_batch(7), MaskKind::kCausal, 8, 2);
  const PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
  const BuiltPlan placed = build_one_plan(workload, options);
  const BuiltPlan whole = build_at_placement(workload, placed.placement, true, options);
  ScheduledPlan scheduled = schedule_at_placement(workload, placed.placement, true, options);
  EXPECT_TRUE(scheduled.built.plan.forward.empty());
  // The schedules' estimates are there before anything is compiled.
  EXPECT_DOUBLE_EQ(scheduled.built.forward.estimate.seconds, whole.forward.estimate.seconds);
  EXPECT_DOUBLE_EQ(scheduled.built.backward.estimate.seconds, whole.backward.estimate.seconds);
  const BuiltPlan stepped = compile_scheduled(std::move(scheduled));
  EXPECT_EQ(serialize_plan(stepped.plan), serialize_plan(whole.plan));
  EXPECT_EQ(serialize_plan(whole.plan), serialize_plan(placed.plan));
}

TEST(PlanBuilder, BinaryRoundTripKeepsEveryField) {
  const Workload workload = small_workload(random_batch(4), MaskKind::kSharedQuestion, 8, 2);
  const BuiltPlan built = build_one_plan(workload, a100_plan_options(Strategy::kDcpPure, {2, 2}));
  const std::string bytes = serialize_plan(built.plan);
  const Plan back = parse_plan(bytes, "memory");
  EXPECT_TRUE(back == built.plan);
  EXPECT_EQ(plan_to_json(back), plan_to_json(built.plan));
  EXPECT_EQ(serialize_plan(back), bytes);
}

TEST(StageScheduler, StageZeroUsesOnlyLocalInputsAndInputsCrossToANodeOnce) {
  const Workload workload = small_workload(random_batch(5), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcp, {4, 2});
  const Placement placement = dcp_placement(workload, options);
  const PlanHeader header = plan_header(workload, options.cluster.shape, "dcp", 0);
  for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
    for (const std::int32_t s : {1, 2, 5}) {
      ScheduleOptions schedule_options;
      schedule_options.fetch_launches = s;
      const PassSchedule schedule =
          schedule_pass(workload, placement, options.cluster, header, pass, schedule_options)
              .schedule;
      EXPECT_GE(schedule.stages, 1);
      for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
        const WorkUnit unit = workload.work_unit(w);
        const DeviceId device = placement.work_unit_device[static_cast<std::size_t>(w)];
        const auto local = [&](const ValueKey& v) {
          return placement.token_block_device[static_cast<std::size_t>(v.block)] == device;
        };
        if (schedule.unit_stage[static_cast<std::size_t>(w)] == 0) {
          EXPECT_TRUE(local(query_value(workload, pass, unit)) && local(key_value(workload, unit)));
        }
      }
      std::set<std::tuple<ValueKey, std::int32_t>> crossings;
      for (const Transfer& t : schedule.transfers) {
        const ClusterShape& shape = options.cluster.shape;
        if (is_output(t.value.kind) || shape.node_of(t.src) == shape.node_of(t.dst)) continue;
        EXPECT_TRUE(crossings.emplace(t.value, shape.node_of(t.dst)).second)
            << "an input crossed into node " << shape.node_of(t.dst) << " twice";
      }
    }
  }
}

// Every budgeted launch fits its budget on each network interface (a100-p4de-like nodes with one
// interface per device here), not only on each node's interfaces together: the budget is the
// launch's stage compute or the pass's least communication time over S launches, whichever is
// longer, and an interface carries its transfers at its own share of the node's bandwidth.
TEST(StageScheduler, EveryBudgetedLaunchFitsEachNetworkInterface) {
  for (const std::uint64_t seed : {3u, 4u, 5u}) {
    const Workload workload = small_workload(random_batch(seed), MaskKind::kCausal, 8, 2);
    PlanOptions options = a100_plan_options(Strategy::kDcp, {2, 4});
    options.cluster.nics_per_node = 4;
    ClusterSpec spec = options.cluster;
    const Placement placement = dcp_placement(workload, options);
    const PlanHeader header = plan_header(workload, spec.shape, "dcp", 0);
    const auto devices = static_cast<std::size_t>(spec.shape.devices());
    const auto nics = static_cast<std::size_t>(spec.shape.nodes * spec.nics_per_node);
    const auto seconds = [&](const ValueKey& v, bool inter) {
      const double bytes =
          static_cast<double>(value_bytes(header, v.kind, workload.blocks().block(v.block).tokens));
      return bytes / (inter ? spec.nic_bandwidth() : spec.intra_node_bandwidth);
    };
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      // The least communication time, as the scheduler's budget defines it.
      std::vector<double> least(2 * devices + nics + 2, 0.0);
      std::set<std::pair<std::int64_t, ValueKey>> seen;
      for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
        const WorkUnit unit = workload.work_unit(w);
        const DeviceId d = placement.work_unit_device[static_cast<std::size_t>(w)];
        for (const ValueKey& v : {query_value(workload, pass, unit), key_value(workload, unit)}) {
          const DeviceId owner = placement.token_block_device[static_cast<std::size_t>(v.block)];
          if (owner == d) continue;
          const std::int32_t node = spec.shape.node_of(d);
          if (node == spec.shape.node_of(owner)) {
            if (!seen.insert({d, v}).second) continue;
            least[static_cast<std::size_t>(d)] += seconds(v, false);
            least[devices + static_cast<std::size_t>(owner)] += seconds(v, false);
          } else {
            if (!seen.insert({-1 - node, v}).second) continue;
            least[2 * devices + static_cast<std::size_t>(spec.nic_of(owner))] += seconds(v, true);
            least[2 * devices + nics + static_cast<std::size_t>(node)] +=
                seconds(v, true) / spec.nics_per_node;
          }
        }
      }
      const double lower_bound = *std::max_element(least.begin(), least.end());
      ScheduleOptions schedule_options;
      schedule_options.fetch_launches = 4;
      const PassSchedule schedule =
          schedule_pass(workload, placement, spec, header, pass, schedule_options).schedule;
      for (std::int32_t launch = 0; launch < schedule_options.fetch_launches - 1; ++launch) {
        double stage_compute = 0;
        std::vector<double> compute(devices, 0.0);
        for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
          if (schedule.unit_stage[static_cast<std::size_t>(w)] != launch) continue;
          double& c = compute[static_cast<std::size_t>(
              placement.work_unit_device[static_cast<std::size_t>(w)])];
          c += unit_seconds(workload, spec, pass, workload.work_unit(w));
          stage_compute = std::max(stage_compute, c);
        }
        const double budget = std::max(stage_compute, lower_bound / 4);
        std::vector<double> nic_send(nics, 0.0), nic_recv(nics, 0.0);
        for (const Transfer& t : schedule.transfers) {
          if (t.launch != launch || is_output(t.value.kind) ||
              spec.shape.node_of(t.src) == spec.shape.node_of(t.dst)) {
            continue;
          }
          nic_send[static_cast<std::size_t>(spec.nic_of(t.src))] += seconds(t.value, true);
          nic_recv[static_cast<std::size_t>(spec.nic_of(t.dst))] += seconds(t.value, true);
        }
        for (std::size_t n = 0; n < nics; ++n) {
          EXPECT_LE(nic_send[n], budget * (1 + 1e-9)) << "seed " << seed << " launch " << launch;
          EXPECT_LE(nic_recv[n], budget * (1 + 1e-9)) << "seed " << seed << " launch " << launch;
        }
      }
    }
  }
}

// Capped stages: in every budgeted stage a device computes at most 1/S of the largest device's
// compute after stage 0 (with 5 % slack), or a single unit; unbudgeted stages are uncapped.
// Choosing keeps the capped or the uncapped schedule, whichever has the lower estimate.
TEST(StageScheduler, CappedStagesHoldEachDevicesShareAndChoosingKeepsTheLowerEstimate) {
  for (const std::uint64_t seed : {3u, 6u, 9u}) {
    const Workload workload = small_workload(random_batch(seed), MaskKind::kCausal, 8, 2);
    PlanOptions options = a100_plan_options(Strategy::kDcp, {2, 4});
    const ClusterSpec& spec = options.cluster;
    const Placement placement = dcp_placement(workload, options);
    const PlanHeader header = plan_header(workload, spec.shape, "dcp", 0);
    const auto devices = static_cast<std::size_t>(spec.shape.devices());
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      for (const std::int32_t s : {2, 4}) {
        ScheduleOptions schedule_options;
        schedule_options.fetch_launches = s;
        const auto run = [&](StageBalance balance) {
          schedule_options.balance = balance;
          return schedule_pass(workload, placement, spec, header, pass, schedule_options);
        };
        const ScheduledPass capped = run(StageBalance::kCapped);
        const ScheduledPass uncapped = run(StageBalance::kUncapped);
        const ScheduledPass chosen = run(StageBalance::kChoose);
        EXPECT_TRUE(capped.balanced);
        EXPECT_FALSE(uncapped.balanced);
        // (a capped schedule must win by more than 0.5 % to be kept)
        EXPECT_LE(chosen.estimate.seconds,
                  std::min(capped.estimate.seconds, uncapped.estimate.seconds) / 0.995);
        EXPECT_EQ(chosen.estimate.seconds, (chosen.balanced ? capped : uncapped).estimate.seconds);

        const PassSchedule& schedule = capped.schedule;
        std::vector<double> pending(devices, 0.0);
        std::vector<std::vector<double>> compute(static_cast<std::size_t>(schedule.stages),
                                                 std::vector<double>(devices, 0.0));
        std::vector<std::vector<int>> units(compute.size(), std::vector<int>(devices, 0));
        for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
          const auto d =
              static_cast<std::size_t>(placement.work_unit_device[static_cast<std::size_t>(w)]);
          const auto stage =
              static_cast<std::size_t>(schedule.unit_stage[static_cast<std::size_t>(w)]);
          const double seconds = unit_seconds(workload, spec, pass, workload.work_unit(w));
          if (stage > 0) pending[d] += seconds;
          compute[stage][d] += seconds;
          ++units[stage][d];
        }
        const double cap = *std::max_element(pending.begin(), pending.end()) / s * 1.05;
        // Stages 1 .. S - 1 are filled by budgeted launches 0 .. S - 2.
        for (std::int32_t stage = 1; stage < std::min(s, schedule.stages); ++stage) {
          for (std::size_t d = 0; d < devices; ++d) {
            const auto st = static_cast<std::size_t>(stage);
            if (units[st][d] <= 1) continue;
            EXPECT_LE(compute[st][d], cap * (1 + 1e-9))
                << "seed " << seed << " pass " << to_string(pass) << " S " << s << " stage "
                << stage << " device " << d;
          }
        }
      }
    }
  }
}

// Choosing S, the search looks kStagesPastKept past the kept S at least: every S up to there
// (each run alone gives one of the schedules the search compared) is no faster, beyond the gain
// share; the kept S is within max_fetch_launches.
TEST(StageScheduler, ChoosingSLooksPastTheKeptStageCount) {
  std::int32_t above_one = 0;
  AttentionShape shape;
  shape.q_heads = 8;
  shape.kv_heads = 2;
  shape.head_dim = 128;
  // Long enough sequences for transfers to matter, so that pipelines of S > 1 win somewhere.
  for (const std::vector<TokenCount>& lengths :
       {std::vector<TokenCount>{32768}, std::vector<TokenCount>{16384, 9000, 3000, 700}}) {
    const SequenceBatch batch(lengths);
    const Workload workload(shape, batch, build_batch_mask(small_spec(MaskKind::kCausal), batch),
                            1024, 1);
    PlanOptions options = a100_plan_options(Strategy::kDcp, {2, 4});
    const ClusterSpec& spec = options.cluster;
    const Placement placement = dcp_placement(workload, options);
    const PlanHeader header = plan_header(workload, spec.shape, "dcp", 0);
    for (const Pass pass : {Pass::kForward, Pass::kBackward}) {
      ScheduleOptions schedule_options;
      schedule_options.own_outputs_last = false;
      schedule_options.max_fetch_launches = 12;
      const ScheduledPass chosen =
          schedule_pass(workload, placement, spec, header, pass, schedule_options);
      ASSERT_GE(chosen.fetch_launches, 1);
      ASSERT_LE(chosen.fetch_launches, schedule_options.max_fetch_launches);
      above_one += chosen.fetch_launches > 1 ? 1 : 0;
      const std::int32_t last =
          std::min(schedule_options.max_fetch_launches, chosen.fetch_launches + kStagesPastKept);
      for (std::int32_t s = 1; s <= last; ++s) {
        ScheduleOptions one = schedule_options;
        one.fetch_launches = s;
        const ScheduledPass alone = schedule_pass(workload, placement, spec, header, pass, one);
        EXPECT_LE(chosen.estimate.seconds, alone.estimate.seconds / kEstimateGainShare)
            << lengths.size() << " sequences, pass " << to_string(pass) << " S " << s;
        if (s == chosen.fetch_launches) {
          EXPECT_EQ(chosen.estimate.seconds, alone.estimate.seconds);
        }
      }
    }
  }
  EXPECT_GT(above_one, 0);  // the batches exercise a pipeline, not only S = 1
}

// Own outputs last (backward, kv kept): the new last stage holds only units whose dq and dkv their
// device owns and whose inputs it has from stage 0, on devices that send partials; putting them
// back into stage 0 gives the same transfers, and the scheduler keeps the variant only where its
// estimate is lower (on some of these batches it is).
TEST(StageScheduler, OwnOutputsLastMovesOnlyOwnOutputsAndKeepsEveryTransfer) {
  int kept_variant = 0;
  for (const std::uint64_t seed : {3u, 4u, 5u, 6u}) {
    // Long sequences at the real head size on a DGX H100 cluster, where compute hides transfers.
    Rng rng(seed);
    std::vector<TokenCount> lengths;
    for (int i = 0; i < 3; ++i) lengths.push_back(rng.uniform_int(2000, 12000));
    AttentionShape shape;
    shape.q_heads = 8;
    shape.kv_heads = 2;
    shape.head_dim = 128;
    const SequenceBatch batch(lengths);
    const Workload workload(shape, batch, build_batch_mask(small_spec(MaskKind::kCausal), batch),
                            512, 1);
    ClusterSpec spec = cluster_preset("h100-dgx");
    spec.shape = {2, 8};
    PlacementOptions placement_options;
    placement_options.cluster = spec.shape;
    const Placement placement = place(workload, placement_options).placement;
    const PlanHeader header = plan_header(workload, spec.shape, "dcp", 0);
    const KeptKv kept = choose_kept_kv(workload, placement, header, kKeepAllKv);
    const ScheduledPass scheduled =
        schedule_pass(workload, placement, spec, header, Pass::kBackward, {}, &kept);
    if (!scheduled.own_outputs_last) continue;
    ++kept_variant;
    const PassSchedule& schedule = scheduled.schedule;
    const std::int32_t last = schedule.stages - 1;
    const auto owner = [&](const ValueKey& v) {
      return placement.token_block_device[static_cast<std::size_t>(v.block)];
    };
    std::set<DeviceId> senders;
    for (const Transfer& t : schedule.transfers) {
      if (is_output(t.value.kind)) senders.insert(t.src);
    }
    PassSchedule unmoved = schedule;
    for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
      if (schedule.unit_stage[static_cast<std::size_t>(w)] != last) continue;
      const WorkUnit unit = workload.work_unit(w);
      const DeviceId d = placement.work_unit_device[static_cast<std::size_t>(w)];
      for (const ValueKey& v : output_values(workload, Pass::kBackward, unit)) {
        EXPECT_EQ(owner(v), d) << "seed " << seed << " unit " << w;
      }
      EXPECT_EQ(owner(query_value(workload, Pass::kBackward, unit)), d);
      const ValueKey kv = key_value(workload, unit);
      const auto& list = kept.per_device[static_cast<std::size_t>(d)];
      EXPECT_TRUE(owner(kv) == d ||
                  std::binary_search(list.begin(), list.end(),
                                     KeptValue{SlotKind::kKV, kv.block, kv.head_block}));
      EXPECT_TRUE(senders.contains(d)) << "seed " << seed << " device " << d;
      unmoved.unit_stage[static_cast<std::size_t>(w)] = 0;
    }
    --unmoved.stages;
    std::erase_if(unmoved.transfers, [](const Transfer& t) { return is_output(t.value.kind); });
    add_partial_transfers(workload, placement, unmoved, PartialRouting::kReduceInNode);
    std::optional<PassSchedule> again = own_outputs_last(workload, placement, [&] {
      PassSchedule inputs_only = unmoved;
      std::erase_if(inputs_only.transfers,
                    [](const Transfer& t) { return is_output(t.value.kind); });
      return inputs_only;
    }());
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->unit_stage, schedule.unit_stage) << "seed " << seed;
    EXPECT_EQ(unmoved.transfers, schedule.transfers) << "seed " << seed;
    EXPECT_LT(scheduled.estimate.seconds,
              0.995 * estimate(workload, placement, spec, header, unmoved).seconds);
  }
  EXPECT_GT(kept_variant, 0);
}

// --- The verifier on broken compiled plans --------------------------------------------------

Plan compiled_plan(std::uint64_t seed = 9) {
  const Workload workload = small_workload(random_batch(seed), MaskKind::kCausal, 8, 2);
  PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
  options.schedule.fetch_launches = 3;
  Plan plan = build_one_plan(workload, options).plan;
  EXPECT_TRUE(verify(plan).ok);
  return plan;
}

template <typename T>
std::pair<std::size_t, std::size_t> find_instruction(const Plan& plan) {
  for (std::size_t d = 0; d < plan.forward.size(); ++d) {
    const auto& code = plan.forward[d].instructions;
    for (std::size_t i = 0; i < code.size(); ++i) {
      if (std::holds_alternative<T>(code[i])) return {d, i};
    }
  }
  ADD_FAILURE() << "no such instruction";
  return {0, 0};
}

std::string rule_of(const Plan& plan) {
  const VerifyReport report = verify(plan);
  EXPECT_FALSE(report.ok);
  return report.first ? report.first->rule : "";
}

TEST(VerifierOnCompiledPlans, CatchesADroppedAttentionInstruction) {
  Plan plan = compiled_plan();
  const auto [d, i] = find_instruction<AttnForward>(plan);
  auto& code = plan.forward[d].instructions;
  code.erase(code.begin() + static_cast<std::ptrdiff_t>(i));
  plan.forward[d].instruction_stage.erase(plan.forward[d].instruction_stage.begin() +
                                          static_cast<std::ptrdiff_t>(i));
  EXPECT_FALSE(verify(plan).ok);
}

TEST(VerifierOnCompiledPlans, CatchesASwappedPeer) {
  Plan plan = compiled_plan();
  const auto [d, i] = find_instruction<Launch>(plan);
  CommOp& op = std::get<Launch>(plan.forward[d].instructions[i]).ops.front();
  op.peer = (op.peer + 1) % plan.header.cluster.devices() == static_cast<std::int32_t>(d)
                ? (op.peer + 2) % plan.header.cluster.devices()
                : (op.peer + 1) % plan.header.cluster.devices();
  const std::string rule = rule_of(plan);
  EXPECT_TRUE(rule == "unmatched" || rule == "send-recv-bytes" || rule == "deadlock" ||
              rule == "send-recv-kind" || rule == "block-table")
      << rule;
}

bool has_merge(const Plan& plan) {
  for (const Program& program : plan.forward) {
    for (const Instruction& instruction : program.instructions) {
      if (std::holds_alternative<Merge>(instruction)) return true;
    }
  }
  return false;
}

TEST(VerifierOnCompiledPlans, CatchesAMissingMerge) {
  // The first of these batches whose plan merges partials on some device.
  Plan plan = compiled_plan();
  for (std::uint64_t seed = 10; seed < 40 && !has_merge(plan); ++seed) plan = compiled_plan(seed);
  const auto [d, i] = find_instruction<Merge>(plan);
  plan.forward[d].instructions.erase(plan.forward[d].instructions.begin() +
                                     static_cast<std::ptrdiff_t>(i));
  plan.forward[d].instruction_stage.erase(plan.forward[d].instruction_stage.begin() +
                                          static_cast<std::ptrdiff_t>(i));
  EXPECT_EQ(rule_of(plan), "output-incomplete");
}

TEST(VerifierOnCompiledPlans, CatchesAReceiveIntoALiveSlot) {
  Plan plan = compiled_plan();
  for (Program& program : plan.forward) {
    for (Instruction& instruction : program.instructions) {
      auto* launch = std::get_if<Launch>(&instruction);
      if (launch == nullptr) continue;
      for (CommOp& op : launch->ops) {
        if (op.direction != CommOp::Direction::kRecv) continue;
        // Slot 0 holds the first value loaded, alive while the device computes.
        const auto first_load =
            std::find_if(program.instructions.begin(), program.instructions.end(),
                         [](const Instruction& x) { return std::holds_alternative<Load>(x); });
        ASSERT_NE(first_load, program.instructions.end());
        op.slot = std::get<Load>(*first_load).slot;
        const std::string rule = rule_of(plan);
        EXPECT_TRUE(rule == "slot-live" || rule == "send-recv-kind") << rule;
        return;
      }
    }
  }
  FAIL() << "no receive in the plan";
}

TEST(VerifierOnCompiledPlans, CatchesAWrongByteCount) {
  Plan plan = compiled_plan();
  const auto [d, i] = find_instruction<Launch>(plan);
  std::get<Launch>(plan.forward[d].instructions[i]).ops.front().bytes += 2;
  const std::string rule = rule_of(plan);
  EXPECT_TRUE(rule == "send-bytes" || rule == "send-recv-bytes") << rule;
}

}  // namespace
}  // namespace dcp

namespace dcp {
namespace {

TEST(StaticPlans, ComputingMaskedTilesAddsEntriesThatVerifyAndCostWholeTiles) {
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kCausalBlockwise}) {
    const Workload workload = small_workload(random_batch(21), kind, 8, 2);
    for (const Strategy strategy : {Strategy::kZigzag, Strategy::kHybrid}) {
      PlanOptions skip = a100_plan_options(strategy, {2, 2});
      PlanOptions compute = skip;
      compute.statics.masked_tiles = MaskedTiles::kCompute;
      const BuiltPlan a = build_one_plan(workload, skip);
      const BuiltPlan b = build_one_plan(workload, compute);
      const VerifyReport report = verify(b.plan);
      ASSERT_TRUE(report.ok) << describe(report);
      // Every pair of blocks of a sequence is a tile; the masked ones hold no pair.
      std::int64_t block_pairs = 0;
      for (SeqIndex s = 0; s < b.workload.batch().size(); ++s) {
        block_pairs +=
            std::int64_t{b.workload.blocks().blocks_in(s)} * b.workload.blocks().blocks_in(s);
      }
      EXPECT_EQ(b.workload.tile_count(), block_pairs);
      EXPECT_GT(b.workload.tile_count(), a.workload.tile_count());
      EXPECT_EQ(b.workload.unmasked_pairs(), a.workload.unmasked_pairs());
      // Pairs per head block: zigzag's one head block holds all 8 q heads, hybrid's one each.
      EXPECT_EQ(report.forward.pairs, a.workload.unmasked_pairs() * b.workload.heads().count());
      EXPECT_GT(b.forward.estimate.compute_seconds, a.forward.estimate.compute_seconds);
    }
  }
}

}  // namespace
}  // namespace dcp
