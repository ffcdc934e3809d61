// SPDX-License-Identifier: Apache-2.0
// The whole planner: every strategy's plan verifies on every mask kind and world size, plans are
// deterministic and survive the plan file, and the verifier catches broken compiled plans.
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_spec.h"

#include "dcp/planner/plan_builder.h"
#include "dcp/program/plan_file.h"
#include "dcp/program/plan_json.h"
#include "dcp/program/program_stats.h"
#include "dcp/program/verifier.h"
#include "dcp/sim/simulator.h"

namespace dcp {
namespace {

// A batch with a 1-token sequence, one shorter than a block and a few random longer ones
// (shorter on many devices, where static strategies cut every sequence into 2P chunks).
SequenceBatch random_batch(std::uint64_t seed, std::int32_t devices = 8) {
  Rng rng(seed);
  std::vector<TokenCount> lengths = {1, 37};
  const TokenCount longest = devices > 8 ? 400 : 900;
  for (int i = 0; i < 3; ++i) lengths.push_back(rng.uniform_int(100, longest));
  std::swap(lengths[0], lengths[static_cast<std::size_t>(rng.uniform_int(0, 4))]);
  return SequenceBatch(lengths);
}

MaskSpec small_spec(MaskKind kind) {
  MaskSpec spec;
  spec.kind = kind;
  spec.window = 200;
  spec.sink = 16;
  spec.block = 48;
  return spec;
}

Workload make(const SequenceBatch& batch, MaskKind kind, std::int32_t q_heads,
              std::int32_t kv_heads) {
  AttentionShape shape;
  shape.q_heads = q_heads;
  shape.kv_heads = kv_heads;
  shape.head_dim = 16;
  return Workload(shape, batch, build_batch_mask(small_spec(kind), batch), 64, 1);
}

PlanOptions options_for(Strategy strategy, ClusterShape shape) {
  PlanOptions options;
  options.strategy = strategy;
  options.cluster = cluster_preset("a100-p4de");
  options.cluster.shape = shape;
  options.seed = 7;
  return options;
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
        make(random_batch(seed++, world.devices()), kind, q_heads, q_heads / 4);
    const BuiltPlan built = build_plan(workload, options_for(strategy, world));
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
  const Workload workload = make(random_batch(1), MaskKind::kCausal, 8, 2);
  EXPECT_THROW(build_plan(workload, options_for(Strategy::kUlysses, {1, 16})), InvalidInput);
  EXPECT_THROW(build_plan(workload, options_for(Strategy::kHybrid, {2, 16})), InvalidInput);
}

TEST(PlanBuilder, SameInputsAndSeedGiveTheSameBytes) {
  const Workload workload = make(random_batch(3), MaskKind::kLambda, 8, 2);
  for (const Strategy strategy : {Strategy::kDcp, Strategy::kZigzag, Strategy::kHybrid}) {
    const std::string a = serialize_plan(build_plan(workload, options_for(strategy, {2, 4})).plan);
    const std::string b = serialize_plan(build_plan(workload, options_for(strategy, {2, 4})).plan);
    EXPECT_EQ(a, b) << to_string(strategy);
  }
}

TEST(PlanBuilder, AStaticPlanBuiltInStepsIsTheOneBuildPlanBuilds) {
  const Workload workload = make(random_batch(5), MaskKind::kCausal, 8, 2);
  for (const Strategy strategy : {Strategy::kZigzag, Strategy::kTe, Strategy::kLoongTrain}) {
    PlanOptions options = options_for(strategy, {2, 4});
    if (strategy == Strategy::kLoongTrain) options.loongtrain_window = 1;
    const BuiltPlan whole = build_plan(workload, options);
    StaticPlan layout = static_layout(workload, options);
    const PassEstimates estimates = static_plan_estimate(layout, options);
    EXPECT_NEAR(estimates.seconds(),
                whole.forward.estimate.seconds + whole.backward.estimate.seconds, 1e-12)
        << to_string(strategy);
    const BuiltPlan stepped = build_static(std::move(layout), options, estimates);
    EXPECT_EQ(serialize_plan(stepped.plan), serialize_plan(whole.plan)) << to_string(strategy);
  }
}

// Where a few sequences are long (at most 8 with one holding half the tokens, or at most 4 under a
// dense mask), dcp also runs its Programs on the hybrid and loongtrain layouts: they verify, move
// no kv in the backward pass, and the fastest of all is kept.
TEST(PlanBuilder, StructuredCandidatesWhereFewLongSequences) {
  const Workload workload = make(SequenceBatch({900, 120, 40}), MaskKind::kCausal, 8, 2);
  PlanOptions options = options_for(Strategy::kDcpPure, {2, 4});
  options.block_sizes = {256, 512};
  options.placement.eps_compute = kRetryEpsCompute;  // no retry at a tighter balance
  const BuiltPlan built = build_plan(workload, options);
  ASSERT_EQ(built.own_candidates.size(), 4u);
  EXPECT_EQ(built.own_candidates[0].block_size, 256);
  EXPECT_EQ(built.own_candidates[1].block_size, 512);
  EXPECT_EQ(built.own_candidates[2].layout, "hybrid");
  EXPECT_EQ(built.own_candidates[3].layout, "loongtrain");
  double fastest = built.own_candidates.front().seconds();
  for (const OwnCandidate& c : built.own_candidates) fastest = std::min(fastest, c.seconds());
  EXPECT_DOUBLE_EQ(sim::simulate(built.plan, options.cluster).seconds(), fastest);
  for (const Strategy layout : kStructuredLayouts) {
    const BuiltPlan structured = build_structured(layout, workload, options);
    const VerifyReport verified = verify(structured.plan);
    EXPECT_TRUE(verified.ok) << to_string(layout) << ": " << describe(verified);
    EXPECT_EQ(structured.plan.header.strategy, "dcp-pure");
    const BuiltPlan layout_plan = build_plan(workload, options_for(layout, {2, 4}));
    const PassTraffic static_backward =
        pass_traffic(layout_plan.plan.header, layout_plan.plan.backward);
    std::int64_t kv_received = 0;
    for (const Program& program : structured.plan.backward) {
      for (const Instruction& instruction : program.instructions) {
        if (const auto* launch = std::get_if<Launch>(&instruction)) {
          for (const CommOp& op : launch->ops) {
            if (op.direction == CommOp::Direction::kRecv &&
                program.slots[static_cast<std::size_t>(op.slot)].kind == SlotKind::kKV) {
              kv_received += op.bytes;
            }
          }
        }
      }
    }
    EXPECT_EQ(kv_received, 0) << to_string(layout);
    const PassTraffic backward = pass_traffic(structured.plan.header, structured.plan.backward);
    EXPECT_LT(backward.inter_node + backward.intra_node,
              static_backward.inter_node + static_backward.intra_node)
        << to_string(layout);
  }
  // Four sequences, none holding half the tokens: enough under a dense mask, not under a sparse
  // one (lambda: a window of 200 on 1200 tokens); five are not, even under a dense one.
  const SequenceBatch four({1200, 1100, 1000, 1000});
  EXPECT_EQ(build_plan(make(four, MaskKind::kCausal, 8, 2), options).own_candidates.size(), 4u);
  EXPECT_EQ(build_plan(make(four, MaskKind::kLambda, 8, 2), options).own_candidates.size(), 2u);
  const Workload five = make(SequenceBatch({1200, 1100, 1000, 1000, 900}), MaskKind::kCausal, 8, 2);
  EXPECT_EQ(build_plan(five, options).own_candidates.size(), 2u);
  // Nor beside too many sequences, or without kept kv.
  std::vector<TokenCount> many(kStructuredMaxSequences, 20);
  many.push_back(900);  // holds most tokens, but beside too many sequences
  EXPECT_EQ(
      build_plan(make(SequenceBatch(many), MaskKind::kCausal, 8, 2), options).own_candidates.size(),
      2u);
  options.kept_kv_budget = kKeepNoKv;
  EXPECT_EQ(build_plan(workload, options).own_candidates.size(), 2u);
}

// A structured layout of few long backward stages has each cut into parts where the estimate and
// then the simulator gain (ScheduleOptions::structured_stage_parts, 0 by default): on one causal
// sequence of 24576 tokens (d = 128, bf16) on 2 x 4, hybrid's ring of two nodes is cut in 2,
// loongtrain's ring of four head groups is not. The cut plan verifies, its backward is faster under
// the simulator than the uncut one (parts = 1), and its forward pass is the same. Parts asked for
// are cut as asked.
TEST(PlanBuilder, StructuredBackwardStagesCutWhereTheEstimateAndTheSimulatorGain) {
  AttentionShape shape;
  shape.q_heads = 8;
  shape.kv_heads = 2;
  shape.head_dim = 128;
  shape.dtype = DType::kBf16;
  const SequenceBatch batch({24576});
  const Workload workload(shape, batch, build_batch_mask(small_spec(MaskKind::kCausal), batch),
                          2048, 1);
  PlanOptions options = options_for(Strategy::kDcpPure, {2, 4});
  const BuiltPlan cut = build_structured(Strategy::kHybrid, workload, options);
  const BuiltPlan loongtrain = build_structured(Strategy::kLoongTrain, workload, options);
  options.schedule.structured_stage_parts = 1;
  const BuiltPlan uncut = build_structured(Strategy::kHybrid, workload, options);
  ASSERT_EQ(cut.backward.stage_parts, 2);
  EXPECT_EQ(uncut.backward.stage_parts, 1);
  EXPECT_EQ(loongtrain.backward.stage_parts, 1);
  for (const BuiltPlan* built : {&cut, &uncut, &loongtrain}) {
    EXPECT_EQ(built->plan.backward.front().stages, built->backward.stages);
  }
  EXPECT_EQ(cut.backward.stages - cut.backward.own_outputs_last,
            1 + (uncut.backward.stages - uncut.backward.own_outputs_last - 1) * 2);
  const VerifyReport verified = verify(cut.plan);
  EXPECT_TRUE(verified.ok) << describe(verified);
  EXPECT_LT(cut.backward.estimate.seconds, uncut.backward.estimate.seconds);
  const sim::PlanSimulation cut_time = sim::simulate(cut.plan, options.cluster);
  const sim::PlanSimulation uncut_time = sim::simulate(uncut.plan, options.cluster);
  EXPECT_LT(cut_time.backward.seconds, uncut_time.backward.seconds);
  EXPECT_EQ(cut_time.forward.seconds, uncut_time.forward.seconds);
  options.schedule.structured_stage_parts = 4;
  const BuiltPlan four = build_structured(Strategy::kHybrid, workload, options);
  EXPECT_EQ(four.backward.stage_parts, 4);
  EXPECT_TRUE(verify(four.plan).ok);
  options.schedule.structured_stage_parts = 65;
  EXPECT_THROW(build_structured(Strategy::kHybrid, workload, options), InvalidInput);
  EXPECT_THROW(build_plan(workload, options), InvalidInput);
}

// Whatever the estimate picks, a structured candidate's backward is never slower under the
// simulator than with its stages whole.
TEST(PlanBuilder, StructuredBackwardNeverSlowerThanItsWholeStages) {
  AttentionShape shape;
  shape.head_dim = 128;
  for (const std::vector<TokenCount>& lengths :
       {std::vector<TokenCount>{16384}, {12288, 6144}, {20000, 3000, 1000}}) {
    const SequenceBatch batch(lengths);
    const Workload workload(shape, batch, build_batch_mask(small_spec(MaskKind::kCausal), batch),
                            2048, 1);
    for (const Strategy layout : kStructuredLayouts) {
      PlanOptions options = options_for(Strategy::kDcpPure, {2, 4});
      const BuiltPlan chosen = build_structured(layout, workload, options);
      options.schedule.structured_stage_parts = 1;
      const BuiltPlan whole = build_structured(layout, workload, options);
      EXPECT_LE(sim::simulate(chosen.plan, options.cluster).backward.seconds,
                sim::simulate(whole.plan, options.cluster).backward.seconds)
          << to_string(layout) << ", " << lengths.size() << " sequences";
    }
  }
}

// Where one sequence dominates under a mask as dense as causal, the partition at blocks below
// kDenseMinBlockSize is not tried when a larger size is; under a sparse mask it is.
TEST(PlanBuilder, NoFineBlocksWhereOneDenseSequenceDominates) {
  const SequenceBatch batch({2500, 300});
  PlanOptions options = options_for(Strategy::kDcpPure, {2, 4});
  options.block_sizes = {1024, kDenseMinBlockSize};
  options.placement.eps_compute = kRetryEpsCompute;  // no retry at a tighter balance
  const auto sizes = [&](MaskKind kind) {
    std::vector<std::string> tried;
    for (const OwnCandidate& c : build_plan(make(batch, kind, 8, 2), options).own_candidates) {
      tried.push_back(c.layout == "partition" ? std::to_string(c.block_size) : c.layout);
    }
    return tried;
  };
  const std::string dense = std::to_string(kDenseMinBlockSize);
  EXPECT_EQ(sizes(MaskKind::kCausal), (std::vector<std::string>{dense, "hybrid", "loongtrain"}));
  EXPECT_EQ(sizes(MaskKind::kLambda),
            (std::vector<std::string>{"1024", dense, "hybrid", "loongtrain"}));
  // Only fine sizes asked for: they are tried.
  options.block_sizes = {512, 1024};
  EXPECT_EQ(sizes(MaskKind::kCausal),
            (std::vector<std::string>{"512", "1024", "hybrid", "loongtrain"}));
}

// Where converting partials costs more than their bytes (slow kernels to launch, fast links), dcp
// also tries its fastest plan with partials in fp32 and keeps that if it is faster; a dtype asked
// for is kept as asked, and fast conversions are not worth a retry.
TEST(PlanBuilder, TriesFp32PartialsWhereConversionsCostMoreThanBytes) {
  const Workload workload = make(SequenceBatch({900, 120, 40}), MaskKind::kCausal, 8, 2);
  PlanOptions options = options_for(Strategy::kDcpPure, {2, 4});
  options.block_sizes = {256};
  options.cluster.kernel_overhead = 200e-6;  // each conversion kernel: 0.2 ms
  options.cluster.intra_node_bandwidth *= 100;
  options.cluster.inter_node_bandwidth *= 100;
  options.cluster.intra_node_stream_bandwidth = 0;
  options.cluster.inter_node_stream_bandwidth = 0;
  const BuiltPlan built = build_plan(workload, options);
  ASSERT_GE(built.own_candidates.size(), 2u);
  const OwnCandidate& retried = built.own_candidates.back();
  EXPECT_EQ(retried.partial_dtype, DType::kFp32);
  const auto bf16 = std::find_if(
      built.own_candidates.begin(), built.own_candidates.end(), [&](const OwnCandidate& c) {
        return c.partial_dtype == DType::kBf16 && c.layout == retried.layout &&
               c.block_size == retried.block_size;
      });
  ASSERT_NE(bf16, built.own_candidates.end());
  EXPECT_LT(retried.seconds(), bf16->seconds());
  EXPECT_EQ(built.plan.header.partial_dtype, DType::kFp32);
  EXPECT_DOUBLE_EQ(sim::simulate(built.plan, options.cluster).seconds(), retried.seconds());
  EXPECT_TRUE(verify(built.plan).ok);

  PlanOptions asked = options;
  asked.partial_dtype = DType::kBf16;
  const BuiltPlan as_asked = build_plan(workload, asked);
  EXPECT_EQ(as_asked.plan.header.partial_dtype, DType::kBf16);
  for (const OwnCandidate& c : as_asked.own_candidates) EXPECT_EQ(c.partial_dtype, DType::kBf16);

  PlanOptions cheap = options_for(Strategy::kDcpPure, {2, 4});  // a100-p4de: 1 us per kernel
  cheap.block_sizes = {256};
  for (const OwnCandidate& c : build_plan(workload, cheap).own_candidates) {
    EXPECT_EQ(c.partial_dtype, DType::kBf16);
  }
}

// The retry is tried where a pass's conversions take longer than the part of its critical-path
// transfers that fp32 would lengthen: the critical transfers times the pass's share of partial
// bytes. On the H200 calibration (docs/gpu_h200/cost_model/h200_device.cluster, 44.66 us per
// kernel) with one causal sequence of 32768 tokens, the kept plan's backward converts for less than
// its critical transfers (which alone would not try the retry) but for more than their partial
// share; the fp32 retry is then tried, kept and faster (3.48 against 3.61 ms, simulated).
TEST(PlanBuilder, TriesFp32PartialsWhereConversionsOutlastThePartialShareOfTransfers) {
  const ClusterSpec h200 = parse_cluster_text(
      "name = gpu-calibrated\nnodes = 4\ndevices_per_node = 8\nintra_node_gbps = 450\n"
      "intra_node_latency_us = 8\ninter_node_gbps = 400\ninter_node_latency_us = 20\n"
      "forward_tflops = 222.1\nbackward_tflops = 140.6\nkernel_overhead_us = 44.66\n"
      "memory_gbps = 3906\nsoftmax_share = 0.9369\nfp32_kernel_factor = 4\n"
      "partial_subtile_extra = 0\nsubtile_overhead_us = 0\ntile_setup_tokens = 46.61\n"
      "launch_overhead_us = 8\nlaunch_peer_overhead_us = 2\nintra_node_stream_gbps = 0\n"
      "inter_node_stream_gbps = 0\nforward_subtile_q = 64\nforward_subtile_kv = 64\n"
      "backward_subtile_q = 64\nbackward_subtile_kv = 32\nnics_per_node = 8\n"
      "whole_subtiles = 1\nintra_node_efficiency = 65536:0.15, 1048576:0.6, 16777216:0.9\n"
      "inter_node_efficiency = 65536:0.1, 1048576:0.5, 16777216:0.85\n",
      "test");
  AttentionShape shape;
  shape.head_dim = 128;
  const SequenceBatch batch({32768});
  const Workload workload(shape, batch, build_batch_mask(small_spec(MaskKind::kCausal), batch),
                          2048, 1);
  PlanOptions options;
  options.strategy = Strategy::kDcpPure;
  options.cluster = h200;
  options.block_sizes = {1024, 2048, 4096};  // as dcp plan's automatic block size
  const BuiltPlan built = build_plan(workload, options);
  const OwnCandidate& retried = built.own_candidates.back();
  ASSERT_EQ(retried.partial_dtype, DType::kFp32);
  const auto bf16 = std::find_if(
      built.own_candidates.begin(), built.own_candidates.end(), [&](const OwnCandidate& c) {
        return c.partial_dtype == DType::kBf16 && c.layout == retried.layout &&
               c.block_size == retried.block_size && c.tighter_balance == retried.tighter_balance;
      });
  ASSERT_NE(bf16, built.own_candidates.end());
  EXPECT_LT(retried.seconds(), bf16->seconds());
  EXPECT_EQ(built.plan.header.partial_dtype, DType::kFp32);
}

TEST(PlanBuilder, BinaryRoundTripKeepsEveryField) {
  const Workload workload = make(random_batch(4), MaskKind::kSharedQuestion, 8, 2);
  const BuiltPlan built = build_plan(workload, options_for(Strategy::kDcpPure, {2, 2}));
  const std::string bytes = serialize_plan(built.plan);
  const Plan back = parse_plan(bytes, "memory");
  EXPECT_TRUE(back == built.plan);
  EXPECT_EQ(plan_to_json(back), plan_to_json(built.plan));
  EXPECT_EQ(serialize_plan(back), bytes);
}

TEST(StageScheduler, StageZeroUsesOnlyLocalInputsAndInputsCrossToANodeOnce) {
  const Workload workload = make(random_batch(5), MaskKind::kCausal, 8, 2);
  PlanOptions options = options_for(Strategy::kDcp, {4, 2});
  PlacementOptions placement_options = options.placement;
  placement_options.cluster = options.cluster.shape;
  const Placement placement = place(workload, placement_options).placement;
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
    const Workload workload = make(random_batch(seed), MaskKind::kCausal, 8, 2);
    PlanOptions options = options_for(Strategy::kDcp, {2, 4});
    options.cluster.nics_per_node = 4;
    ClusterSpec spec = options.cluster;
    PlacementOptions placement_options = options.placement;
    placement_options.cluster = spec.shape;
    const Placement placement = place(workload, placement_options).placement;
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
    const Workload workload = make(random_batch(seed), MaskKind::kCausal, 8, 2);
    PlanOptions options = options_for(Strategy::kDcp, {2, 4});
    const ClusterSpec& spec = options.cluster;
    PlacementOptions placement_options = options.placement;
    placement_options.cluster = spec.shape;
    const Placement placement = place(workload, placement_options).placement;
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

TEST(PlanBuilder, KeepsDcpsFastestPlanOverTheBlockSizesAsked) {
  const Workload workload = make(SequenceBatch({700, 300, 90, 5}), MaskKind::kCausal, 8, 2);
  PlanOptions options = options_for(Strategy::kDcpPure, {2, 2});
  // 2048 and 4096 both collapse to 1024, the next power of two above the longest sequence.
  options.block_sizes = {128, 2048, 64, 4096};
  options.structured_layouts = false;  // (one sequence holds most tokens: see the next test)
  options.placement.eps_compute = kRetryEpsCompute;  // no retry (the test after the next)
  const BuiltPlan swept = build_plan(workload, options);
  ASSERT_EQ(swept.own_candidates.size(), 3u);
  EXPECT_EQ(swept.own_candidates[0].block_size, 128);
  EXPECT_EQ(swept.own_candidates[1].block_size, 1024);
  EXPECT_EQ(swept.own_candidates[2].block_size, 64);
  // The kept plan is the fastest, and the very plan dcp builds at that block size alone.
  const auto fastest = std::min_element(
      swept.own_candidates.begin(), swept.own_candidates.end(),
      [](const OwnCandidate& a, const OwnCandidate& b) { return a.seconds() < b.seconds(); });
  EXPECT_EQ(swept.workload.blocks().block_size(), fastest->block_size);
  PlanOptions alone = options;
  alone.block_sizes.clear();
  const Workload cut(workload.shape(), workload.batch(),
                     build_batch_mask(small_spec(MaskKind::kCausal), workload.batch()),
                     fastest->block_size, 1);
  const BuiltPlan direct = build_plan(cut, alone);
  EXPECT_EQ(serialize_plan(swept.plan), serialize_plan(direct.plan));
  const sim::PlanSimulation simulated = sim::simulate(swept.plan, options.cluster);
  EXPECT_DOUBLE_EQ(simulated.seconds(), fastest->seconds());
  EXPECT_TRUE(verify(swept.plan).ok);
  // With selection, dcp's candidate is its fastest block size.
  options.strategy = Strategy::kDcp;
  const BuiltPlan selected = build_plan(workload, options);
  EXPECT_DOUBLE_EQ(selected.selection.candidates.front().seconds(), fastest->seconds());
  // A size that is not positive is refused, naming it.
  options.block_sizes = {0};
  try {
    build_plan(workload, options);
    FAIL() << "block size 0";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("block size 0"), std::string::npos) << e.what();
  }
}

// dcp's kRetryPartitions fastest partitions are placed again at the tighter balance
// kRetryEpsCompute: the retries are listed after the block sizes, at the fastest ones' sizes,
// fastest first; the kept plan is the fastest of all and the very plan dcp builds at that size and
// balance alone. A balance already that tight or tighter is not retried (a retry must not break
// the bound asked for).
TEST(PlanBuilder, RetriesItsFastestPartitionsAtATighterBalance) {
  const Workload workload =
      make(SequenceBatch({400, 350, 300, 250, 200, 90, 5}), MaskKind::kCausal, 8, 2);
  PlanOptions options = options_for(Strategy::kDcpPure, {2, 2});
  options.block_sizes = {64, 128, 256};
  ASSERT_GT(options.placement.eps_compute, kRetryEpsCompute);
  const BuiltPlan built = build_plan(workload, options);
  ASSERT_GE(built.own_candidates.size(), 3u);
  const auto& tried = built.own_candidates;
  std::vector<OwnCandidate> by_time(tried.begin(), tried.begin() + 3);
  std::stable_sort(by_time.begin(), by_time.end(),
                   [](const auto& a, const auto& b) { return a.seconds() < b.seconds(); });
  ASSERT_EQ(kRetryPartitions, 2u);
  ASSERT_EQ(tried.size(), 5u) << "a retry was outside its bounds";
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(tried[i].tighter_balance);
    EXPECT_TRUE(tried[3 + i].tighter_balance);
    EXPECT_EQ(tried[3 + i].block_size, by_time[i].block_size);
  }
  const auto kept = std::min_element(tried.begin(), tried.end(), [](const auto& a, const auto& b) {
    return a.seconds() < b.seconds();
  });
  EXPECT_DOUBLE_EQ(sim::simulate(built.plan, options.cluster).seconds(), kept->seconds());
  PlanOptions alone = options;
  alone.block_sizes.clear();
  if (kept->tighter_balance) alone.placement.eps_compute = kRetryEpsCompute;
  const Workload cut(workload.shape(), workload.batch(),
                     build_batch_mask(small_spec(MaskKind::kCausal), workload.batch()),
                     kept->block_size, 1);
  EXPECT_EQ(serialize_plan(build_plan(cut, alone).plan), serialize_plan(built.plan));
  options.placement.eps_compute = kRetryEpsCompute;
  EXPECT_EQ(build_plan(workload, options).own_candidates.size(), 3u);
}

// dcp's selection from dcp-pure's plan is build_plan's dcp plan: the same bytes, own candidates and
// selection, whichever plan is kept (a fast network makes a static one win on some batches).
TEST(PlanBuilder, SelectingFromDcpPuresPlanGivesBuildPlansDcpPlan) {
  std::set<std::string> kept;
  for (const bool fast : {false, true}) {
    for (std::uint64_t seed = 40; seed < 43; ++seed) {
      const Workload workload = make(random_batch(seed), MaskKind::kCausal, 8, 2);
      PlanOptions options = options_for(Strategy::kDcp, {2, 2});
      options.block_sizes = {64, 128};
      if (fast) {
        options.cluster.inter_node_bandwidth *= 50;
        options.cluster.inter_node_stream_bandwidth *= 50;
      }
      const BuiltPlan whole = build_plan(workload, options);
      PlanOptions pure = options;
      pure.strategy = Strategy::kDcpPure;
      const BuiltPlan selected = select_plan(workload, options, build_plan(workload, pure));
      EXPECT_EQ(serialize_plan(selected.plan), serialize_plan(whole.plan)) << seed;
      EXPECT_EQ(selected.selection.kept, whole.selection.kept);
      ASSERT_EQ(selected.selection.candidates.size(), whole.selection.candidates.size());
      for (std::size_t i = 0; i < whole.selection.candidates.size(); ++i) {
        EXPECT_EQ(selected.selection.candidates[i].strategy,
                  whole.selection.candidates[i].strategy);
        EXPECT_DOUBLE_EQ(selected.selection.candidates[i].seconds(),
                         whole.selection.candidates[i].seconds());
      }
      EXPECT_EQ(selected.own_candidates.size(), whole.own_candidates.size());
      kept.insert(whole.selection.kept);
    }
  }
  EXPECT_GT(kept.size(), 1u);  // dcp's own plan and a static one
  PlanOptions pure = options_for(Strategy::kDcpPure, {2, 2});
  const Workload workload = make(random_batch(40), MaskKind::kCausal, 8, 2);
  try {
    select_plan(workload, pure, build_plan(workload, pure));
    FAIL() << "select_plan with dcp-pure's options";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("dcp-pure"), std::string::npos) << e.what();
  }
}

TEST(PlanBuilder, DcpKeepsTheFastestOfItsOwnAndTheStaticPlansUnderTheSimulator) {
  std::uint64_t seed = 21;
  std::set<std::string> kept;
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kFull, MaskKind::kLambda}) {
    const Workload workload = make(random_batch(seed++), kind, 8, 2);
    PlanOptions options = options_for(Strategy::kDcp, {2, 2});
    // A fast network makes static plans competitive on some batches.
    options.cluster.inter_node_bandwidth *= 50;
    options.cluster.inter_node_stream_bandwidth *= 50;
    const BuiltPlan best = build_plan(workload, options);
    ASSERT_EQ(best.selection.candidates.size(), 7u);  // dcp and the six static strategies
    const sim::PlanSimulation kept_time = sim::simulate(best.plan, options.cluster);
    for (const PlanCandidate& candidate : best.selection.candidates) {
      ASSERT_TRUE(candidate.feasible) << candidate.reason;
      // Each candidate's time is that of the plan its strategy builds on its own.
      options.strategy =
          candidate.strategy == "dcp" ? Strategy::kDcpPure : parse_strategy(candidate.strategy);
      const sim::PlanSimulation alone =
          sim::simulate(build_plan(workload, options).plan, options.cluster);
      if (candidate.simulated) {
        EXPECT_DOUBLE_EQ(candidate.forward_seconds, alone.forward.seconds);
        EXPECT_DOUBLE_EQ(candidate.backward_seconds, alone.backward.seconds);
      } else {
        // Screened out by its schedule estimate, which was far above the kept plan's time.
        EXPECT_GE(candidate.estimate_seconds, kScreenFactor * kept_time.seconds());
      }
      EXPECT_LE(kept_time.seconds(), alone.seconds()) << candidate.strategy;
    }
    options.strategy = Strategy::kDcp;
    EXPECT_EQ(best.plan.header.strategy,
              best.selection.kept == "dcp" ? "dcp" : "dcp/" + best.selection.kept);
    EXPECT_TRUE(verify(best.plan).ok);
    kept.insert(best.selection.kept);
  }
  // With a network this fast, a static plan wins at least once (these batches: Ulysses).
  EXPECT_TRUE(kept.size() > 1 || *kept.begin() != "dcp");
  // Ulysses cannot split 8 q heads over 16 devices: a candidate that is not feasible.
  const Workload workload = make(random_batch(30), MaskKind::kCausal, 8, 2);
  const BuiltPlan wide = build_plan(workload, options_for(Strategy::kDcp, {2, 8}));
  const auto ulysses =
      std::find_if(wide.selection.candidates.begin(), wide.selection.candidates.end(),
                   [](const PlanCandidate& c) { return c.strategy == "ulysses"; });
  ASSERT_NE(ulysses, wide.selection.candidates.end());
  EXPECT_FALSE(ulysses->feasible);
  EXPECT_NE(ulysses->reason.find("head"), std::string::npos);
  // dcp-pure never selects.
  EXPECT_TRUE(
      build_plan(workload, options_for(Strategy::kDcpPure, {2, 2})).selection.candidates.empty());
}

// --- The verifier on broken compiled plans --------------------------------------------------

Plan compiled_plan(std::uint64_t seed = 9) {
  const Workload workload = make(random_batch(seed), MaskKind::kCausal, 8, 2);
  PlanOptions options = options_for(Strategy::kDcpPure, {2, 2});
  options.schedule.fetch_launches = 3;
  Plan plan = build_plan(workload, options).plan;
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
    const Workload workload = make(random_batch(21), kind, 8, 2);
    for (const Strategy strategy : {Strategy::kZigzag, Strategy::kHybrid}) {
      PlanOptions skip = options_for(strategy, {2, 2});
      PlanOptions compute = skip;
      compute.masked_tiles = MaskedTiles::kCompute;
      const BuiltPlan a = build_plan(workload, skip);
      const BuiltPlan b = build_plan(workload, compute);
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
