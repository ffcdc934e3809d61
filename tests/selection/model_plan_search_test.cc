// SPDX-License-Identifier: Apache-2.0
// Plans of a model with several attention kinds: one token placement, each kind's compute
// balanced on its own, every kind's Programs verified; one kind gives a plan of one mask.
#include "dcp/selection/model_plan_search.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/mask_spec.h"

#include "dcp/planner/placement/kind_placement.h"
#include "dcp/program/plan_file/model_plan_file.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/selection/plan_search.h"
#include "dcp/selection/plan_search_internal.h"
#include "dcp/sim/model_simulation.h"

#include "tests/testing/error_text.h"
#include "tests/testing/plan_fixtures.h"

namespace dcp {
namespace {

AttentionShape small_shape() {
  AttentionShape shape;
  shape.q_heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 16;
  shape.dtype = DType::kBf16;
  return shape;
}

Workload kind_workload(const SequenceBatch& batch, const std::string& spec, TokenCount block) {
  return Workload(small_shape(), batch, build_batch_mask(parse_mask_spec(spec), batch), block, 1);
}

std::vector<KindWorkload> global_and_local(const SequenceBatch& batch, TokenCount block,
                                           std::int32_t global_layers = 1,
                                           std::int32_t local_layers = 5) {
  return {{"global", global_layers, kind_workload(batch, "causal", block)},
          {"local", local_layers, kind_workload(batch, "sliding_window:window=96", block)}};
}

std::vector<double> kind_compute(const Workload& workload, const Placement& placement) {
  std::vector<double> load(placement.work_unit_device.empty()
                               ? 0
                               : static_cast<std::size_t>(placement.cluster.devices()),
                           0.0);
  for (WorkUnitId w = 0; w < workload.work_unit_count(); ++w) {
    load[static_cast<std::size_t>(placement.work_unit_device[static_cast<std::size_t>(w)])] +=
        static_cast<double>(workload.work_unit(w).pairs);
  }
  return load;
}

const SequenceBatch kBatch({1500, 700, 300, 96, 1});

TEST(KindPlacement, OneKindIsPlaceBitForBit) {
  const Workload workload = kind_workload(kBatch, "causal", 64);
  PlacementOptions options;
  options.cluster = {2, 2};
  options.seed = 3;
  const PlacementResult alone = place(workload, options);
  const KindPlacementResult kinds = place_kinds({workload}, {32}, options);
  ASSERT_EQ(kinds.placements.size(), 1u);
  EXPECT_EQ(kinds.placements[0].token_block_device, alone.placement.token_block_device);
  EXPECT_EQ(kinds.placements[0].work_unit_device, alone.placement.work_unit_device);
}

TEST(KindPlacement, SharesTokensAndBalancesEveryKindOnItsOwn) {
  const std::vector<KindWorkload> kinds = global_and_local(kBatch, 64);
  PlacementOptions options;
  options.cluster = {2, 2};
  options.seed = 3;
  const KindPlacementResult placed =
      place_kinds({kinds[0].workload, kinds[1].workload}, {1, 5}, options);
  ASSERT_EQ(placed.placements.size(), 2u);
  EXPECT_EQ(placed.placements[0].token_block_device, placed.placements[1].token_block_device);
  for (std::size_t k = 0; k < 2; ++k) {
    const Workload& workload = kinds[k].workload;
    ASSERT_NO_THROW(validate(placed.placements[k], workload));
    EXPECT_TRUE(placed.within_bounds[k]) << kinds[k].name;
    const std::vector<double> load = kind_compute(workload, placed.placements[k]);
    const double total = static_cast<double>(workload.unmasked_pairs());
    const double mean = total / static_cast<double>(load.size());
    // Each kind within its own cap: (1 + eps) x its mean, in pairs x heads per head block.
    const double cap = static_cast<double>(placed.compute_bounds[k]) /
                       static_cast<double>(workload.heads().head_block_size());
    EXPECT_GE(cap, mean);
    for (const double device : load) EXPECT_LE(device, cap + 1e-9) << kinds[k].name;
  }
}

TEST(KindPlacement, RefusesKindsCutIntoOtherBlocks) {
  PlacementOptions options;
  options.cluster = {1, 2};
  EXPECT_THROW(
      place_kinds({kind_workload(kBatch, "causal", 64), kind_workload(kBatch, "causal", 128)},
                  {1, 1}, options),
      InvalidInput);
  EXPECT_THROW(place_kinds({kind_workload(kBatch, "causal", 64)}, {0}, options), InvalidInput);
}

TEST(ModelPlanSearch, OneKindGivesThePlanOfOneMaskByteForByte) {
  const Workload workload = kind_workload(kBatch, "causal", 64);
  PlanOptions options = testing::a100_plan_options(Strategy::kDcp, {2, 2});
  options.search.block_sizes = {64, 128};
  const BuiltPlan alone = build_plan(workload, options);
  const BuiltModelPlan model = build_model_plan({{"attention", 1, workload}}, options);
  ASSERT_TRUE(model.plan.is_single_plan());
  EXPECT_EQ(serialize_model_plan(model.plan), serialize_plan(alone.plan));
}

TEST(ModelPlanSearch, EveryKindVerifiesOnOneTokenPlacementAndIsDeterministic) {
  for (const Strategy strategy : {Strategy::kDcp, Strategy::kDcpPure, Strategy::kZigzag}) {
    PlanOptions options = testing::a100_plan_options(strategy, {2, 2});
    options.search.block_sizes = {64, 128};
    const std::vector<KindWorkload> kinds = global_and_local(kBatch, 64);
    const BuiltModelPlan built = build_model_plan(kinds, options);
    const std::string what(to_string(strategy));
    ASSERT_EQ(built.plan.kinds.size(), 2u) << what;
    EXPECT_EQ(built.plan.kinds[0].name, "global");
    EXPECT_EQ(built.plan.kinds[1].layers, 5);
    const ModelVerifyReport report = verify(built.plan);
    EXPECT_TRUE(report.ok) << what << ": " << describe(report);
    EXPECT_NO_THROW(check_model_plan(built.plan, "")) << what;
    // Each kind computes exactly its own mask's work.
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(report.kinds[k].report.forward.pairs,
                built.kinds[k].workload.unmasked_pairs() * built.kinds[k].workload.heads().count())
          << what;
    }
    EXPECT_EQ(serialize_model_plan(build_model_plan(kinds, options).plan),
              serialize_model_plan(built.plan))
        << what;
  }
}

TEST(ModelPlanSearch, KeepsTheFastestSimulatedStepAndNamesIt) {
  PlanOptions options = testing::a100_plan_options(Strategy::kDcp, {2, 2});
  options.search.block_sizes = {64, 128};
  const BuiltModelPlan built = build_model_plan(global_and_local(kBatch, 64, 2, 10), options);
  ASSERT_FALSE(built.candidates.empty());
  const sim::ModelSimulation simulation = sim::simulate(built.plan, options.cluster);
  // dcp's own candidates (one per block size) share its name: the kept one is the fastest.
  double kept = 1e300, fastest = 1e300;
  for (const PlanCandidate& c : built.candidates) {
    if (!c.feasible || !c.simulated) continue;
    fastest = std::min(fastest, c.seconds());
    if (c.strategy == built.kept) kept = std::min(kept, c.seconds());
  }
  EXPECT_DOUBLE_EQ(kept, fastest);
  // The step: the sum over kinds of layers x (forward + backward).
  const double step =
      2 * simulation.kinds[0].passes.seconds() + 10 * simulation.kinds[1].passes.seconds();
  EXPECT_DOUBLE_EQ(simulation.step_seconds, step);
  EXPECT_NEAR(simulation.step_seconds, fastest, 1e-12 * fastest);
}

TEST(ModelPlanSearch, PlacesOnEachKindsOwnPlacementAndIsNoSlowerThanOneMasksPlacement) {
  PlanOptions options = testing::a100_plan_options(Strategy::kDcp, {2, 2});
  options.search.block_sizes = {128, 64};
  // Packed whole, or in node groups, the batch's plan is faster than any partition's, whose plans
  // below the search then screens.
  options.search.packed_layout = false;
  options.search.node_groups = false;
  const std::vector<KindWorkload> kinds = global_and_local(kBatch, 64, 2, 10);
  const BuiltModelPlan built = build_model_plan(kinds, options);
  // The local kind planned alone at the block size nearest to what its queries read (a 96-token
  // window, less at the sequences' starts: 64 rather than 128).
  const std::string named = "dcp (on local's placement, block 64)";
  const auto it = std::find_if(built.candidates.begin(), built.candidates.end(),
                               [&](const PlanCandidate& c) { return c.strategy == named; });
  ASSERT_NE(it, built.candidates.end()) << named;
  // Kept: at most the global kind's own plan with its placement run for every layer.
  PlanOptions own = options;
  own.strategy = Strategy::kDcpPure;
  const BuiltPlan global = build_plan(kinds[0].workload, own);
  const double one_mask =
      sim::simulate(build_on_base(global, 0, kinds, options, false).plan, options.cluster)
          .step_seconds;
  EXPECT_LE(sim::simulate(built.plan, options.cluster).step_seconds, one_mask * (1 + 1e-12));
  EXPECT_LE(sim::simulate(built.plan, options.cluster).step_seconds, it->seconds() * (1 + 1e-12));
  // The global kind's placement at the block size its search did not keep is a candidate too.
  const TokenCount kept_size = global.workload.blocks().block_size();
  const TokenCount other_size = kept_size == 64 ? 128 : 64;
  const std::string runner_up =
      "dcp (on global's placement, block " + std::to_string(other_size) + ")";
  const auto other = std::find_if(built.candidates.begin(), built.candidates.end(),
                                  [&](const PlanCandidate& c) { return c.strategy == runner_up; });
  ASSERT_NE(other, built.candidates.end()) << runner_up;
  EXPECT_TRUE(other->simulated);
  EXPECT_LE(sim::simulate(built.plan, options.cluster).step_seconds,
            other->seconds() * (1 + 1e-12));
  EXPECT_EQ(std::count_if(built.candidates.begin(), built.candidates.end(),
                          [&](const PlanCandidate& c) {
                            return c.strategy == "dcp (on global's placement, block " +
                                                     std::to_string(kept_size) + ")";
                          }),
            0);
}

// Blocks shorter than a window only add tiles: a kind is planned alone at the size of the sweep
// nearest to the keys its queries read on average, a wide window's at a coarse size.
TEST(ModelPlanSearch, PlansEachOtherKindAloneAtTheBlockSizeItsQueriesRead) {
  PlanOptions options = testing::a100_plan_options(Strategy::kDcp, {2, 2});
  options.search.block_sizes = {64, 128, 256};
  const SequenceBatch batch({3000, 2000});
  for (const auto& [window, size] : {std::pair{256, 256}, std::pair{100, 128}, std::pair{40, 64}}) {
    const std::vector<KindWorkload> kinds = {
        {"global", 1, kind_workload(batch, "causal", 64)},
        {"local", 5, kind_workload(batch, "sliding_window:window=" + std::to_string(window), 64)}};
    const BuiltModelPlan built = build_model_plan(kinds, options);
    std::vector<std::string> own;
    for (const PlanCandidate& candidate : built.candidates) {
      if (candidate.strategy.find("on local's placement") != std::string::npos) {
        own.push_back(candidate.strategy);
      }
    }
    ASSERT_EQ(own.size(), 1u) << "window " << window;
    EXPECT_EQ(own.front(), "dcp (on local's placement, block " + std::to_string(size) + ")")
        << "window " << window;
  }
}

// Where the densest kind's search leaves out the finer block sizes (one dense sequence dominates:
// kDenseMinBlockSize), the other kind's own placement is not cut finer either: the densest
// kind's layers run on its blocks too.
TEST(ModelPlanSearch, PlansEachOtherKindAloneAtABlockSizeTheDensestKindsSearchTries) {
  PlanOptions options = testing::a100_plan_options(Strategy::kDcp, {2, 4});
  options.search.block_sizes = {1024, kDenseMinBlockSize};
  const auto own_placement = [&](const SequenceBatch& batch) {
    const std::vector<KindWorkload> kinds = {
        {"global", 1, kind_workload(batch, "causal", 1024)},
        {"local", 5, kind_workload(batch, "sliding_window:window=1024", 1024)}};
    std::vector<std::string> own;
    for (const PlanCandidate& candidate : build_model_plan(kinds, options).candidates) {
      if (candidate.strategy.find("on local's placement") != std::string::npos) {
        own.push_back(candidate.strategy);
      }
    }
    return own;
  };
  const std::string dense = std::to_string(kDenseMinBlockSize);
  EXPECT_EQ(own_placement(SequenceBatch({2500, 300})),
            std::vector<std::string>{"dcp (on local's placement, block " + dense + ")"});
  // Beside nine short sequences the long one is not a few long sequences' (few_long_sequences):
  // the densest kind's search tries 1024-token blocks, and the window reads about that many keys.
  std::vector<TokenCount> lengths(10, 300);
  lengths.front() = 2500;
  EXPECT_EQ(own_placement(SequenceBatch(lengths)),
            std::vector<std::string>{"dcp (on local's placement, block 1024)"});
}

TEST(ModelPlanSearch, ScreensOnlyCandidatesSlowerThanTheKeptStep) {
  // Batches and windows where the search screens some candidates (by their schedules'
  // estimates, or by the mean compute before scheduling).
  struct Case {
    std::vector<TokenCount> lengths;
    std::string window;
    std::int32_t nodes;
  };
  const std::vector<Case> cases = {{{1500, 700, 300, 96, 1}, "sliding_window:window=96", 2},
                                   {{2000, 2000}, "sliding_window:window=96", 1},
                                   {{2000, 2000}, "sliding_window:window=512", 2}};
  std::int32_t screened = 0, bounded = 0;
  for (const Case& c : cases) {
    const SequenceBatch batch(c.lengths);
    const std::vector<KindWorkload> kinds = {{"global", 2, kind_workload(batch, "causal", 64)},
                                             {"local", 10, kind_workload(batch, c.window, 64)}};
    PlanOptions options = testing::a100_plan_options(Strategy::kDcp, {c.nodes, 2});
    options.search.block_sizes = {64, 128, 256};
    const BuiltModelPlan built = build_model_plan(kinds, options);
    PlanOptions every = options;
    every.search.screen_factor = std::numeric_limits<double>::infinity();
    const BuiltModelPlan unscreened = build_model_plan(kinds, every);
    // The same plan, byte for byte, as when every candidate is compiled and simulated.
    EXPECT_EQ(built.kept, unscreened.kept) << c.window;
    EXPECT_EQ(serialize_model_plan(built.plan), serialize_model_plan(unscreened.plan)) << c.window;
    const double step = sim::simulate(built.plan, options.cluster).step_seconds;
    ASSERT_EQ(built.candidates.size(), unscreened.candidates.size());
    for (std::size_t i = 0; i < built.candidates.size(); ++i) {
      const PlanCandidate& candidate = built.candidates[i];
      if (!candidate.feasible || candidate.simulated) continue;
      ++screened;
      bounded += candidate.bounded ? 1 : 0;
      EXPECT_GE(candidate.estimate_seconds, options.search.screen_factor * step)
          << candidate.strategy;
      // Built anyway, it is slower than the kept step.
      const PlanCandidate& built_anyway = unscreened.candidates[i];
      ASSERT_EQ(built_anyway.strategy, candidate.strategy);
      if (built_anyway.simulated) {
        EXPECT_GT(built_anyway.seconds(), step) << candidate.strategy;
      }
    }
  }
  EXPECT_GT(screened, bounded);
  EXPECT_GT(bounded, 0);
}

TEST(ModelPlanSearch, RefusesAScreenFactorBelowOne) {
  PlanOptions options = testing::a100_plan_options(Strategy::kDcp, {1, 2});
  options.search.screen_factor = 0.5;
  try {
    build_model_plan(global_and_local(kBatch, 64), options);
    FAIL() << "a screen factor of 0.5 was taken";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("screen factor must be at least 1"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("0.5"), std::string::npos) << e.what();
  }
  options.search.screen_factor = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(build_plan(kind_workload(kBatch, "causal", 64), options), InvalidInput);
}

TEST(KindPlacement, OnQBlocksComputesEveryWorkUnitWhereItsQBlockIs) {
  PlanOptions options = testing::a100_plan_options(Strategy::kDcpPure, {2, 2});
  const std::vector<KindWorkload> kinds = global_and_local(kBatch, 64);
  const BuiltPlan global = build_one_plan(kinds[0].workload, options);
  const Workload& local = kinds[1].workload;
  const Placement placed = on_q_blocks(global.placement, local);
  EXPECT_EQ(placed.token_block_device, global.placement.token_block_device);
  ASSERT_EQ(placed.work_unit_device.size(), static_cast<std::size_t>(local.work_unit_count()));
  for (WorkUnitId w = 0; w < local.work_unit_count(); ++w) {
    const WorkUnit unit = local.work_unit(w);
    EXPECT_EQ(placed.work_unit_device[static_cast<std::size_t>(w)],
              placed.token_block_device[static_cast<std::size_t>(
                  local.blocks().block_id(unit.seq, unit.q_block))]);
  }
  EXPECT_NO_THROW(validate(placed, local));
  EXPECT_THROW(on_q_blocks(global.placement, kind_workload(kBatch, "causal", 32)), InvalidInput);
}

ModelPlan two_kind_plan() {
  PlanOptions options = testing::a100_plan_options(Strategy::kDcpPure, {1, 2});
  return build_model_plan(global_and_local(kBatch, 64), options).plan;
}

TEST(ModelPlanFile, RoundTripsAndReadsPlainPlanFilesAsOneKind) {
  const ModelPlan plan = two_kind_plan();
  const std::string bytes = serialize_model_plan(plan);
  ASSERT_TRUE(is_kinds_file(bytes));
  EXPECT_EQ(parse_model_plan(bytes, "model.plan"), plan);
  const ModelPlan single = single_kind(plan.kinds[0].plan);
  const std::string plain = serialize_model_plan(single);
  EXPECT_EQ(plain, serialize_plan(plan.kinds[0].plan));
  EXPECT_EQ(parse_model_plan(plain, "one.plan"), single);
}

TEST(ModelPlanFile, NamesEveryFault) {
  const ModelPlan plan = two_kind_plan();
  const std::string bytes = serialize_model_plan(plan);
  // A damaged table, a damaged kind and a truncated file.
  std::string damaged = bytes;
  damaged[30] = static_cast<char>(damaged[30] ^ 1);
  EXPECT_NE(
      testing::invalid_input_text([&] { parse_model_plan(damaged, "m.plan"); }).find("checksum"),
      std::string::npos);
  damaged = bytes;
  damaged[bytes.size() - 3] = static_cast<char>(damaged[bytes.size() - 3] ^ 1);
  EXPECT_NE(testing::invalid_input_text([&] {
              parse_model_plan(damaged, "m.plan");
            }).find("kind 'local'"),
            std::string::npos);
  EXPECT_NE(testing::invalid_input_text(
                [&] { parse_model_plan(bytes.substr(0, bytes.size() - 5), "m.plan"); }),
            "");
  // Kinds named twice, zero layers, an unknown kind asked for.
  ModelPlan twice = plan;
  twice.kinds[1].name = "global";
  EXPECT_NE(testing::invalid_input_text([&] { check_model_plan(twice, "m"); }).find("given twice"),
            std::string::npos);
  ModelPlan zero = plan;
  zero.kinds[0].layers = 0;
  EXPECT_NE(testing::invalid_input_text([&] { check_model_plan(zero, "m"); }).find("0 layers"),
            std::string::npos);
  EXPECT_NE(testing::invalid_input_text([&] {
              plan.kind("sliding");
            }).find("no attention kind 'sliding'"),
            std::string::npos);
}

TEST(ModelVerifier, FindsKindsThatDoNotShareTheTokenPlacement) {
  ModelPlan plan = two_kind_plan();
  // Device 0's local Programs claim device 1's blocks: each kind alone may still be a plan, but
  // the tensors one device holds would not serve both kinds.
  Plan& local = plan.kinds[1].plan;
  for (Program* program : {&local.forward[0], &local.backward[0]}) {
    program->owned.pop_back();
  }
  const ModelVerifyReport report = verify(plan);
  ASSERT_FALSE(report.ok);
  ASSERT_TRUE(report.first.has_value());
  // The mutation breaks kind 'local' itself (an output is no longer owned) or, where the kind
  // still verifies, the shared placement.
  EXPECT_TRUE(report.first_kind == "local" || report.first->rule == "kind-placement")
      << describe(report);
  EXPECT_THROW(check_model_plan(plan, "m"), InvalidInput);
}

TEST(AttentionKinds, ValidateNamesTheOffendingValue) {
  const SequenceBatch batch({100, 50});
  const auto masks = build_batch_mask(parse_mask_spec("causal"), batch);
  const auto other = build_batch_mask(parse_mask_spec("causal"), SequenceBatch({100, 60}));
  EXPECT_NO_THROW(validate_kinds({{"global", 1, masks}, {"local", 3, masks}}, batch));
  EXPECT_NE(testing::invalid_input_text([&] {
              validate_kinds({{"a", 1, masks}, {"a", 1, masks}}, batch);
            }).find("'a' given twice"),
            std::string::npos);
  EXPECT_NE(testing::invalid_input_text([&] {
              validate_kinds({{"a", 0, masks}}, batch);
            }).find("0 layers"),
            std::string::npos);
  EXPECT_NE(testing::invalid_input_text([&] {
              validate_kinds({{"a", 1, other}}, batch);
            }).find("60 tokens"),
            std::string::npos);
  EXPECT_NE(testing::invalid_input_text([&] {
              validate_kinds({{"bad name", 1, masks}}, batch);
            }).find("bad name"),
            std::string::npos);
  EXPECT_NE(testing::invalid_input_text([&] { validate_kinds({}, batch); }), "");
}

// Where the densest kind's own search keeps its plan in node groups (its sequences at each node's
// block size), every kind runs on those blocks and placement, and the model plan verifies.
TEST(ModelPlanSearch, RunsEveryKindOnTheDensestKindsNodeGroups) {
  PlanOptions options = testing::a100_plan_options(Strategy::kDcpPure, {2, 2});
  options.search.block_sizes = {128, 64};
  options.search.partitions = false;  // the node groups and the packings only
  options.search.packed_layout = false;
  const std::vector<KindWorkload> kinds = global_and_local(kBatch, 64, 2, 10);
  PlanOptions own = options;
  const BuiltPlan global = build_plan(kinds[0].workload, own);
  const OwnCandidate* kept = plan_search::kept_own(global);
  ASSERT_NE(kept, nullptr);
  ASSERT_EQ(kept->layout, kNodeGroupsLayout);
  const BuiltModelPlan built = build_model_plan(kinds, options);
  const ModelVerifyReport report = verify(built.plan);
  EXPECT_TRUE(report.ok);
  for (const BuiltPlan& kind : built.kinds) {
    EXPECT_EQ(kind.placement.token_block_device, built.kinds.front().placement.token_block_device);
  }
}

}  // namespace
}  // namespace dcp
