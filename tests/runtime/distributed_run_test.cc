// SPDX-License-Identifier: Apache-2.0
// Every strategy's plan, executed on local ranks, matches dense fp64 attention forward and
// backward on every mask kind and world size (static strategies also in data parallel groups);
// bf16 runs stay within twice a single-device bf16 kernel's error.
#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "dcp/kernels/attention_kernels.h"
#include "dcp/planner/compile/compiler.h"
#include "dcp/planner/schedule/stage_scheduler.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/selection/plan_search.h"

#include "tests/runtime/run_fixtures.h"
#include "tests/testing/plan_fixtures.h"

namespace dcp {
namespace {

using testing::batch_shape;
using testing::runtime_plan_options;

struct Outcome {
  runtime::OutputErrors errors;
  runtime::BatchOutputs outputs;
};

Outcome run_built(const Workload& workload, const BuiltPlan& built, std::uint64_t seed) {
  const runtime::BatchInputs inputs = runtime::random_inputs(batch_shape(workload), seed);
  runtime::RunOptions options;
  options.kernel_threads = 1;
  const std::span<const TokenCount> offsets = workload.batch().offsets();
  runtime::RunResult result = runtime::run_plan_locally(built.plan, offsets, inputs, options);
  const runtime::DenseReference reference =
      runtime::dense_reference(workload, inputs, built.plan.header.softmax_scale, 2);
  return {runtime::compare_outputs(inputs.shape, result.outputs, reference),
          std::move(result.outputs)};
}

Outcome run_and_compare(const Workload& workload, Strategy strategy, ClusterShape world,
                        std::uint64_t seed, std::int32_t static_data_parallel = 1) {
  PlanOptions plan_options = runtime_plan_options(strategy, world);
  plan_options.statics.data_parallel = static_data_parallel;
  return run_built(workload, build_plan(workload, plan_options), seed);
}

void expect_within(const runtime::OutputErrors& errors, double bound, const std::string& what) {
  EXPECT_EQ(errors.non_finite, 0) << what;
  EXPECT_EQ(errors.lse_mismatches, 0) << what;
  EXPECT_LE(errors.o.relative(), bound) << what;
  EXPECT_LE(errors.lse.relative(), bound) << what;
  EXPECT_LE(errors.dq.relative(), bound) << what;
  EXPECT_LE(errors.dk.relative(), bound) << what;
  EXPECT_LE(errors.dv.relative(), bound) << what;
  // A comparison that saw nothing proves nothing.
  EXPECT_GT(errors.o.max_reference, 0) << what;
  EXPECT_GT(errors.dk.max_reference, 0) << what;
}

// The runtime fixtures' batch of `seed` under a mask of `kind`, fp32, 64-token blocks.
Workload runtime_workload(std::uint64_t seed, MaskKind kind) {
  const SequenceBatch batch = testing::runtime_batch(seed);
  return Workload(testing::runtime_shape(DType::kFp32), batch,
                  build_batch_mask(testing::runtime_spec(kind), batch), 64, 1);
}

class EveryStrategyMaskAndWorld
    : public ::testing::TestWithParam<std::tuple<Strategy, ClusterShape>> {};

TEST_P(EveryStrategyMaskAndWorld, MatchesDenseFp64AttentionForwardAndBackward) {
  const auto [strategy, world] = GetParam();
  std::uint64_t seed = 21;
  for (const MaskKind kind : all_mask_kinds()) {
    const Workload workload = runtime_workload(seed, kind);
    const Outcome outcome = run_and_compare(workload, strategy, world, seed++);
    expect_within(outcome.errors, 1e-4, std::string(to_string(kind)));
  }
}

TEST_P(EveryStrategyMaskAndWorld, GivesMinusInfinityAndZerosForRowsThatAttendToNothing) {
  const auto [strategy, world] = GetParam();
  const SequenceBatch batch = testing::runtime_batch(3);
  std::vector<SequenceMask> masks;
  for (SeqIndex s = 0; s < batch.size(); ++s) {
    masks.push_back(testing::causal_with_empty_rows(batch.length(s), 20));
  }
  const Workload workload(testing::runtime_shape(DType::kFp32), batch, masks, 64, 1);
  const Outcome outcome = run_and_compare(workload, strategy, world, 9);
  expect_within(outcome.errors, 1e-4, "empty rows");
  // The first 20 rows of every sequence: lse = -inf, o = 0, dq = 0; their keys get dk = dv = 0.
  const runtime::BatchShape shape = batch_shape(workload);
  const auto o = runtime::to_doubles(shape.storage, outcome.outputs.o);
  const auto dk = runtime::to_doubles(shape.storage, outcome.outputs.dk);
  const auto row = static_cast<std::size_t>(shape.q_heads * shape.head_dim);
  const auto kv_row = static_cast<std::size_t>(shape.kv_heads * shape.head_dim);
  for (SeqIndex s = 0; s < batch.size(); ++s) {
    for (TokenCount i = 0; i < std::min<TokenCount>(20, batch.length(s)); ++i) {
      const auto token = static_cast<std::size_t>(batch.offset(s) + i);
      EXPECT_TRUE(std::isinf(outcome.outputs.lse[token]) && outcome.outputs.lse[token] < 0);
      EXPECT_TRUE(std::all_of(o.begin() + static_cast<std::ptrdiff_t>(token * row),
                              o.begin() + static_cast<std::ptrdiff_t>((token + 1) * row),
                              [](double x) { return x == 0; }));
      EXPECT_TRUE(std::all_of(dk.begin() + static_cast<std::ptrdiff_t>(token * kv_row),
                              dk.begin() + static_cast<std::ptrdiff_t>((token + 1) * kv_row),
                              [](double x) { return x == 0; }));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Runs, EveryStrategyMaskAndWorld,
    ::testing::Combine(::testing::Values(Strategy::kDcp, Strategy::kDcpPure, Strategy::kRing,
                                         Strategy::kZigzag, Strategy::kUlysses, Strategy::kHybrid,
                                         Strategy::kTe, Strategy::kLoongTrain),
                       ::testing::Values(ClusterShape{1, 1}, ClusterShape{1, 2}, ClusterShape{1, 3},
                                         ClusterShape{2, 2}, ClusterShape{2, 4})),
    [](const auto& param_info) {
      const ClusterShape world = std::get<1>(param_info.param);
      std::string name = std::string(to_string(std::get<0>(param_info.param)));
      std::replace(name.begin(), name.end(), '-', '_');
      return name + "_" + std::to_string(world.nodes) + "x" +
             std::to_string(world.devices_per_node);
    });

// dcp's Programs on the hybrid and loongtrain layouts (structured candidates, kept kv, partials
// reduced dcp's way) compute the same attention.
TEST(StructuredCandidates, MatchDenseFp64AttentionForwardAndBackward) {
  std::uint64_t seed = 61;
  for (const ClusterShape world : {ClusterShape{2, 2}, ClusterShape{2, 4}}) {
    for (const MaskKind kind : all_mask_kinds()) {
      const Workload workload = runtime_workload(seed, kind);
      for (const Strategy layout : kStructuredLayouts) {
        const BuiltPlan built =
            build_structured(layout, workload, runtime_plan_options(Strategy::kDcpPure, world));
        const Outcome outcome = run_built(workload, built, seed);
        expect_within(outcome.errors, 1e-4,
                      std::string(to_string(layout)) + " layout, " + std::string(to_string(kind)) +
                          ", " + std::to_string(world.nodes) + "x" +
                          std::to_string(world.devices_per_node));
      }
      ++seed;
    }
  }
}

// The structured candidates with each backward stage cut into 2 and 4 parts (split_stages in
// structured_plan.cc; the estimate cuts where a layout's stages are few and long, here it is forced
// on a small batch) compute the same attention on 2 x 4 local ranks.
TEST(StructuredCandidates, WithBackwardStagesCutMatchDenseFp64Attention) {
  std::uint64_t seed = 81;
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kLambda}) {
    const Workload workload = runtime_workload(seed, kind);
    for (const std::int32_t parts : {2, 4}) {
      PlanOptions options = runtime_plan_options(Strategy::kDcpPure, {2, 4});
      options.schedule.structured_stage_parts = parts;
      for (const Strategy layout : kStructuredLayouts) {
        const std::string name = std::string(to_string(layout)) + " layout, " +
                                 std::string(to_string(kind)) + ", " + std::to_string(parts) +
                                 " parts";
        const BuiltPlan built = build_structured(layout, workload, options);
        ASSERT_EQ(built.backward.stage_parts, parts) << name;
        const VerifyReport report = verify(built.plan);
        ASSERT_TRUE(report.ok) << name << ": " << describe(report);
        expect_within(run_built(workload, built, seed).errors, 1e-4, name);
      }
    }
    ++seed;
  }
}

// LoongTrain with its outer hops spread over their rounds' launches (spread_outer_hops; plans keep
// that schedule where the estimate finds it faster), compiled, verified and run on 2 x 4 local
// ranks (two rounds of a ring of 4 head groups, windows of 2), matches dense fp64 attention.
TEST(LoongTrainSpreadOuterHops, MatchDenseFp64AttentionForwardAndBackward) {
  std::uint64_t seed = 71;
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kLambda}) {
    const Workload workload = runtime_workload(seed, kind);
    const PlanOptions options = runtime_plan_options(Strategy::kLoongTrain, {2, 4});
    StaticPlan layout = static_layout(workload, options);
    ASSERT_EQ(layout.ring.window, 2);
    ASSERT_EQ(layout.ring.ring_size(), 4);
    const StaticPlan whole = static_plan(Strategy::kLoongTrain, workload, {2, 4});
    for (const auto& [pass, schedule] : {std::pair{&layout.forward, &whole.forward},
                                         std::pair{&layout.backward, &whole.backward}}) {
      *pass = spread_outer_hops(layout.workload, layout.placement, layout.ring, *schedule);
      ASSERT_NE(pass->transfers, schedule->transfers) << "some outer hop moved";
    }
    const PassEstimates estimates = static_plan_estimate(layout, options);
    const BuiltPlan built = build_static(std::move(layout), options, estimates);
    ASSERT_TRUE(verify(built.plan).ok) << to_string(kind);
    expect_within(run_built(workload, built, seed).errors, 1e-4, std::string(to_string(kind)));
    ++seed;
  }
}

// Static strategies with data parallelism: each group of devices runs the strategy on its
// sequences, and together they compute the whole batch's attention.
TEST(StaticDataParallel, GroupsMatchDenseFp64AttentionForwardAndBackward) {
  std::uint64_t seed = 51;
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kLambda}) {
    const Workload workload = runtime_workload(seed, kind);
    for (const Strategy strategy : kStaticStrategies) {
      const Outcome outcome = run_and_compare(workload, strategy, {2, 2}, seed, 2);
      expect_within(outcome.errors, 1e-4,
                    std::string(to_string(kind)) + " " + std::string(to_string(strategy)));
    }
    for (const Strategy strategy : {Strategy::kZigzag, Strategy::kTe, Strategy::kLoongTrain}) {
      const Outcome outcome = run_and_compare(workload, strategy, {2, 4}, seed, 0);  // automatic
      expect_within(
          outcome.errors, 1e-4,
          std::string(to_string(kind)) + " " + std::string(to_string(strategy)) + " automatic");
    }
    ++seed;
  }
}

// Partials a device received or merged and then sent on rather than stored: a node's partials
// reduced on a device that does not own them (an owner stores what it receives).
std::int64_t merges_sent_on(const std::vector<Program>& programs) {
  std::int64_t count = 0;
  for (const Program& program : programs) {
    std::set<SlotId> gathered;
    for (const Instruction& instruction : program.instructions) {
      if (const auto* merge = std::get_if<Merge>(&instruction)) gathered.insert(merge->dst);
      if (const auto* sum = std::get_if<Sum>(&instruction)) gathered.insert(sum->dst);
      if (const auto* store = std::get_if<Store>(&instruction)) gathered.erase(store->slot);
      if (const auto* free = std::get_if<Free>(&instruction)) {
        for (const SlotId slot : free->slots) gathered.erase(slot);
      }
      if (const auto* launch = std::get_if<Launch>(&instruction)) {
        for (const CommOp& op : launch->ops) {
          const SlotKind kind = program.slots[static_cast<std::size_t>(op.slot)].kind;
          if (op.direction == CommOp::Direction::kRecv && is_output(kind)) {
            gathered.insert(op.slot);
          } else if (op.direction == CommOp::Direction::kSend && gathered.erase(op.slot) > 0) {
            ++count;
          }
        }
      }
    }
  }
  return count;
}

// dcp's own plans on two nodes merge a node's partials inside it before they cross, in both
// passes (this batch and mask make several devices of a node contribute to one output block);
// executed on local ranks, the results match dense fp64 attention.
TEST(InNodeReduction, ReducedPartialsMatchDenseFp64AttentionForwardAndBackward) {
  const SequenceBatch batch({700, 450, 1260, 415, 2555});
  MaskSpec spec;
  spec.kind = MaskKind::kCausalBlockwise;
  spec.block = 32;
  spec.local = 2;
  const Workload workload(testing::runtime_shape(DType::kFp32), batch,
                          build_batch_mask(spec, batch), 64, 1);
  for (const ClusterShape world : {ClusterShape{2, 2}, ClusterShape{2, 4}}) {
    const std::string name =
        std::to_string(world.nodes) + "x" + std::to_string(world.devices_per_node);
    // Whether a plan reduces partials depends on where the partitioner puts the work; the first
    // planner seed whose plan does so in both passes is executed.
    bool found = false;
    for (std::uint64_t seed = 0; seed < 16 && !found; ++seed) {
      PlanOptions options = runtime_plan_options(Strategy::kDcpPure, world);
      options.seed = seed;
      options.placement.eps_compute = 0.1;  // a tight balance splits rows across devices
      const BuiltPlan built = build_plan(workload, options);
      if (merges_sent_on(built.plan.forward) == 0 || merges_sent_on(built.plan.backward) == 0) {
        continue;
      }
      found = true;
      const runtime::BatchInputs inputs = runtime::random_inputs(batch_shape(workload), 17);
      runtime::RunOptions run_options;
      run_options.kernel_threads = 1;
      const runtime::RunResult result =
          runtime::run_plan_locally(built.plan, workload.batch().offsets(), inputs, run_options);
      expect_within(
          runtime::compare_outputs(
              inputs.shape, result.outputs,
              runtime::dense_reference(workload, inputs, built.plan.header.softmax_scale, 2)),
          1e-4, name);
    }
    EXPECT_TRUE(found) << name << ": no planner seed in [0, 16) reduces partials in both passes";
  }
}

// Plans of two groups of devices, each planned alone at its own block size and stage count,
// joined into one plan of 2 x 2 local ranks (join_group_plans): it computes the same attention.
TEST(JoinedGroupPlans, MatchDenseFp64AttentionForwardAndBackward) {
  std::uint64_t seed = 91;
  for (const MaskKind kind : all_mask_kinds()) {
    const Workload workload = runtime_workload(seed, kind);
    const testing::TwoGroups two = testing::two_group_plans(workload, 2);
    const BuiltPlan joined =
        join_group_plans(workload, two.groups, runtime_plan_options(Strategy::kDcpPure, {2, 2}));
    expect_within(run_built(workload, joined, seed).errors, 1e-4, std::string(to_string(kind)));
    ++seed;
  }
}

// A group that runs a static strategy's layout at the workload's own head blocks joins a group of
// dcp's own: Ulysses on one node (each device a quarter of the heads), dcp-pure on the other.
TEST(JoinedGroupPlans, WithAStaticGroupMatchDenseFp64AttentionForwardAndBackward) {
  std::uint64_t seed = 131;
  for (const MaskKind kind : all_mask_kinds()) {
    const Workload workload = runtime_workload(seed, kind);
    std::vector<BuiltPlan> plans;
    std::vector<GroupPlan> groups;
    plans.reserve(2);
    for (const Strategy strategy : {Strategy::kUlysses, Strategy::kDcpPure}) {
      const auto g = static_cast<SeqIndex>(plans.size());
      std::vector<std::size_t> sequences;
      std::vector<TokenCount> lengths;
      std::vector<SequenceMask> masks;
      for (SeqIndex seq = g; seq < workload.batch().size(); seq += 2) {
        sequences.push_back(static_cast<std::size_t>(seq));
        lengths.push_back(workload.batch().length(seq));
        masks.push_back(workload.mask(seq));
      }
      const Workload share(workload.shape(), SequenceBatch(std::move(lengths)), std::move(masks),
                           64, 1);
      PlanOptions options = runtime_plan_options(strategy, {1, 4});
      options.statics.device_head_blocks = false;
      plans.push_back(build_one_plan(share, options));
      groups.push_back({&plans.back(), static_cast<DeviceId>(4 * g), std::move(sequences)});
    }
    ASSERT_EQ(plans.front().workload.heads().head_block_size(), 1);
    const BuiltPlan joined =
        join_group_plans(workload, groups, runtime_plan_options(Strategy::kDcpPure, {2, 4}));
    ASSERT_TRUE(verify(joined.plan).ok) << to_string(kind);
    expect_within(run_built(workload, joined, seed).errors, 1e-4, std::string(to_string(kind)));
    ++seed;
  }
}

// A pass of a plan with each device's own outputs of one stage last (own_outputs_last).
struct OwnOutputsLastCase {
  BuiltPlan built;
  PassSchedule schedule;  // a pass of built's plan; its partial transfers are ignored
  std::int32_t from = 0;  // the stage whose own-output units move
};

// Each case of a causal batch of `lengths` on 2 x 2 and 2 x 4 local ranks, with the move made,
// partials routed dcp's way, compiled into the case's plan, verified and run: it matches dense fp64
// attention, and some partials now travel before the last stage computes.
template <typename MakeCase>
void expect_own_outputs_last_runs(std::vector<TokenCount> lengths, std::uint64_t seed,
                                  MakeCase make_case) {
  const SequenceBatch batch(std::move(lengths));
  const Workload workload(testing::runtime_shape(DType::kFp32), batch,
                          build_batch_mask(testing::runtime_spec(MaskKind::kCausal), batch), 64, 1);
  for (const ClusterShape world : {ClusterShape{2, 2}, ClusterShape{2, 4}}) {
    const std::string name =
        std::to_string(world.nodes) + "x" + std::to_string(world.devices_per_node);
    OwnOutputsLastCase c = make_case(workload, runtime_plan_options(Strategy::kDcpPure, world));
    std::erase_if(c.schedule.transfers, [](const Transfer& t) { return is_output(t.value.kind); });
    std::optional<PassSchedule> moved =
        own_outputs_last(c.built.workload, c.built.placement, c.schedule, c.from);
    ASSERT_TRUE(moved.has_value()) << name;
    ASSERT_EQ(moved->stages, c.schedule.stages + 1) << name;
    add_partial_transfers(c.built.workload, c.built.placement, *moved,
                          PartialRouting::kReduceInNode);
    std::int32_t sent_before_last = 0;
    for (const Transfer& t : moved->transfers) {
      if (is_output(t.value.kind) && t.launch < moved->stages) ++sent_before_last;
    }
    EXPECT_GT(sent_before_last, 0) << name;
    (moved->pass == Pass::kForward ? c.built.plan.forward : c.built.plan.backward) = compile_pass(
        c.built.workload, c.built.placement, c.built.plan.header, *moved, &c.built.kept);
    const VerifyReport report = verify(c.built.plan);
    ASSERT_TRUE(report.ok) << name << ": " << describe(report);
    expect_within(run_built(workload, c.built, seed).errors, 1e-4, name);
  }
}

// A backward pass with each device's own outputs last (docs/scheduling.md, item 7). The estimate
// keeps that schedule on long batches; here it is forced on a small one, so that the run stays
// short.
TEST(OwnOutputsLast, MatchesDenseFp64AttentionForwardAndBackward) {
  expect_own_outputs_last_runs(
      {700, 450, 1260, 415, 2555}, 17, [](const Workload& workload, const PlanOptions& options) {
        BuiltPlan built = build_plan(workload, options);
        ScheduleOptions schedule_options = options.schedule;
        schedule_options.own_outputs_last = false;
        PassSchedule schedule =
            schedule_pass(built.workload, built.placement, options.cluster, built.plan.header,
                          Pass::kBackward, schedule_options, &built.kept)
                .schedule;
        return OwnOutputsLastCase{std::move(built), std::move(schedule), 0};
      });
}

// A structured layout's forward pass with each device's own outputs last from its last stage
// (the outputs of the q it received by all-to-all finished a stage earlier and sent back while it
// computes its own; the estimate keeps it on long batches, build_structured), run with the
// structured candidate's backward pass.
TEST(OwnOutputsLast, OnTheLoongTrainLayoutMatchesDenseFp64Attention) {
  expect_own_outputs_last_runs(
      {2555, 700, 415}, 19, [](const Workload& workload, const PlanOptions& options) {
        PlanOptions layout_options = options;
        layout_options.strategy = Strategy::kLoongTrain;
        PassSchedule schedule = static_layout(workload, layout_options).forward;
        const std::int32_t last = schedule.stages - 1;
        return OwnOutputsLastCase{build_structured(Strategy::kLoongTrain, workload, options),
                                  std::move(schedule), last};
      });
}

// One device, one kernel call per sequence (the whole sequence as one tile), outputs rounded to
// the storage type as Store rounds them and delta from the rounded o as the backward loads it.
runtime::BatchOutputs single_device(const Workload& workload, const runtime::BatchInputs& in) {
  const runtime::BatchShape& shape = in.shape;
  auto kernel_set = kernels::make_kernels(kernels::KernelKind::kCpu, 1);
  kernels::AttentionParams params;
  params.q_heads = shape.q_heads;
  params.kv_heads = shape.kv_heads;
  params.head_dim = shape.head_dim;
  params.storage = shape.storage;
  params.softmax_scale = static_cast<float>(workload.shape().effective_scale());
  runtime::BatchOutputs out = runtime::empty_outputs(shape);
  const std::size_t element = kernels::element_size(shape.storage);
  const auto hq = static_cast<std::size_t>(shape.q_heads);
  const auto hk = static_cast<std::size_t>(shape.kv_heads);
  const auto d = static_cast<std::size_t>(shape.head_dim);
  const SequenceBatch& batch = workload.batch();
  for (SeqIndex s = 0; s < batch.size(); ++s) {
    const auto first = static_cast<std::size_t>(batch.offset(s));
    const auto length = static_cast<std::int32_t>(batch.length(s));
    const auto n = static_cast<std::size_t>(length);
    const runtime::SequenceIntervals mask = runtime::sequence_intervals(workload.mask(s));
    const std::byte* k = in.k.data() + first * hk * d * element;
    const std::byte* v = in.v.data() + first * hk * d * element;
    const kernels::ForwardTile tile{k, v, length, {mask.row_offsets.data(), mask.intervals.data()}};
    std::vector<float> o(n * hq * d), lse(n * hq), delta(n * hq);
    kernels::ForwardRow row;
    row.q = in.q.data() + first * hq * d * element;
    row.q_tokens = length;
    row.tiles = std::span<const kernels::ForwardTile>(&tile, 1);
    row.o = o.data();
    row.lse = lse.data();
    kernel_set->forward(params, std::span<const kernels::ForwardRow>(&row, 1));
    std::byte* o_out = out.o.data() + first * hq * d * element;
    kernels::from_float(shape.storage, o.data(), o_out, o.size());
    for (std::size_t h = 0; h < hq; ++h) {
      std::copy_n(lse.data() + h * n, n,
                  out.lse.data() + h * static_cast<std::size_t>(shape.tokens) + first);
    }
    const std::byte* dout = in.dout.data() + first * hq * d * element;
    kernel_set->delta(shape.storage, o_out, dout, length, shape.q_heads, shape.head_dim,
                      delta.data());
    std::vector<float> dq(n * hq * d), dk(n * hk * d), dv(n * hk * d);
    const kernels::BackwardTile back_tile{k, v, length, tile.mask, dk.data(), dv.data(), false};
    kernels::BackwardRow back;
    back.q = row.q;
    back.dout = dout;
    back.lse = lse.data();
    back.delta = delta.data();
    back.q_tokens = length;
    back.tiles = std::span<const kernels::BackwardTile>(&back_tile, 1);
    back.dq = dq.data();
    kernel_set->backward(params, std::span<const kernels::BackwardRow>(&back, 1));
    kernels::from_float(shape.storage, dq.data(), out.dq.data() + first * hq * d * element,
                        dq.size());
    kernels::from_float(shape.storage, dk.data(), out.dk.data() + first * hk * d * element,
                        dk.size());
    kernels::from_float(shape.storage, dv.data(), out.dv.data() + first * hk * d * element,
                        dv.size());
  }
  return out;
}

TEST(DistributedRun, Bf16StaysWithinTwiceTheSingleDeviceBf16Error) {
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kLambda, MaskKind::kSharedQuestion}) {
    const SequenceBatch batch = testing::runtime_batch(40);
    const Workload workload(testing::runtime_shape(DType::kBf16), batch,
                            build_batch_mask(testing::runtime_spec(kind), batch), 64, 1);
    const runtime::BatchInputs inputs = runtime::random_inputs(batch_shape(workload), 41);
    const runtime::DenseReference reference =
        runtime::dense_reference(workload, inputs, workload.shape().effective_scale(), 2);
    const runtime::OutputErrors single =
        runtime::compare_outputs(inputs.shape, single_device(workload, inputs), reference);
    for (const Strategy strategy : {Strategy::kDcp, Strategy::kZigzag, Strategy::kHybrid}) {
      const Outcome outcome = run_and_compare(workload, strategy, {2, 2}, 41);
      const std::string what =
          std::string(to_string(kind)) + " " + std::string(to_string(strategy));
      const runtime::OutputErrors& e = outcome.errors;
      EXPECT_EQ(e.non_finite, 0) << what;
      EXPECT_EQ(e.lse_mismatches, 0) << what;
      EXPECT_LE(e.o.max_abs, 2 * single.o.max_abs) << what;
      EXPECT_LE(e.lse.max_abs, 2 * single.lse.max_abs + 1e-6) << what;
      EXPECT_LE(e.dq.max_abs, 2 * single.dq.max_abs) << what;
      EXPECT_LE(e.dk.max_abs, 2 * single.dk.max_abs) << what;
      EXPECT_LE(e.dv.max_abs, 2 * single.dv.max_abs) << what;
      // bf16 rounding is visible: the bound is not vacuous.
      EXPECT_GT(single.o.max_abs, 1e-4) << what;
    }
  }
}

TEST(DistributedRun, RepeatedRunsGiveIdenticalBytes) {
  const SequenceBatch batch = testing::runtime_batch(8);
  const Workload workload(testing::runtime_shape(DType::kFp32), batch,
                          build_batch_mask(testing::runtime_spec(MaskKind::kLambda), batch), 64, 1);
  const Outcome a = run_and_compare(workload, Strategy::kDcp, {2, 2}, 3);
  const Outcome b = run_and_compare(workload, Strategy::kDcp, {2, 2}, 3);
  EXPECT_EQ(a.outputs.o, b.outputs.o);
  EXPECT_EQ(a.outputs.lse, b.outputs.lse);
  EXPECT_EQ(a.outputs.dq, b.outputs.dq);
  EXPECT_EQ(a.outputs.dk, b.outputs.dk);
  EXPECT_EQ(a.outputs.dv, b.outputs.dv);
}

}  // namespace
}  // namespace dcp
