// SPDX-License-Identifier: Apache-2.0
// Plans of disjoint device groups joined into one plan: each group's placement and schedules kept
// on its devices, the Programs verified, and groups that do not fit the batch refused.
#include "dcp/planner/joined_plan.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/program/plan_file/plan_file.h"
#include "dcp/program/verifier/verifier.h"
#include "dcp/sim/simulator.h"

#include "tests/testing/error_text.h"
#include "tests/testing/plan_fixtures.h"

namespace dcp {
namespace {

using testing::a100_plan_options;

TEST(JoinGroupPlans, KeepsEachGroupsPlacementAndSchedulesOnItsDevices) {
  for (const MaskKind kind : {MaskKind::kCausal, MaskKind::kLambda}) {
    const Workload workload =
        testing::small_workload(testing::random_batch(31), kind, /*q_heads=*/8, /*kv_heads=*/2);
    const testing::TwoGroups two = testing::two_group_plans(workload, 2);
    const PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
    const BuiltPlan joined = join_group_plans(workload, two.groups, options);
    EXPECT_TRUE(verify(joined.plan).ok) << to_string(kind);
    EXPECT_EQ(joined.plan.forward.size(), 4u);

    const sim::PlanSimulation whole = sim::simulate(joined.plan, options.cluster);
    std::int32_t most_stages = 0;
    for (const GroupPlan& group : two.groups) {
      const BuiltPlan& own = *group.plan;
      most_stages = std::max(most_stages, own.forward_schedule.stages);
      // Its sequences at its block size, every block and work unit on its devices as it placed
      // them.
      for (std::size_t i = 0; i < group.sequences.size(); ++i) {
        const auto seq = static_cast<SeqIndex>(group.sequences[i]);
        const auto local = static_cast<SeqIndex>(i);
        ASSERT_EQ(joined.workload.blocks().blocks_in(seq), own.workload.blocks().blocks_in(local));
        for (LocalBlockIndex b = 0; b < own.workload.blocks().blocks_in(local); ++b) {
          EXPECT_EQ(joined.placement.token_block_device[static_cast<std::size_t>(
                        joined.workload.blocks().block_id(seq, b))],
                    group.first_device + own.placement.token_block_device[static_cast<std::size_t>(
                                             own.workload.blocks().block_id(local, b))]);
        }
      }
      // Each device computes what it computed in its group's own plan: the same kernels, so the
      // same simulated compute time.
      const sim::PlanSimulation alone =
          sim::simulate(own.plan, a100_plan_options(Strategy::kDcpPure, {1, 2}).cluster);
      for (std::int32_t d = 0; d < 2; ++d) {
        const auto device = static_cast<std::size_t>(group.first_device + d);
        EXPECT_DOUBLE_EQ(whole.forward.devices[device].compute_seconds,
                         alone.forward.devices[static_cast<std::size_t>(d)].compute_seconds);
        EXPECT_DOUBLE_EQ(whole.backward.devices[device].compute_seconds,
                         alone.backward.devices[static_cast<std::size_t>(d)].compute_seconds);
      }
    }
    EXPECT_EQ(joined.forward_schedule.stages, most_stages);
    EXPECT_EQ(joined.forward.stages, most_stages);
    // No transfer crosses from one group to the other.
    for (const PassSchedule* schedule : {&joined.forward_schedule, &joined.backward_schedule}) {
      for (const Transfer& transfer : schedule->transfers) {
        EXPECT_EQ(options.cluster.shape.node_of(transfer.src),
                  options.cluster.shape.node_of(transfer.dst));
      }
    }
    // Deterministic: the same bytes again.
    EXPECT_EQ(serialize_plan(join_group_plans(workload, two.groups, options).plan),
              serialize_plan(joined.plan));
  }
}

TEST(JoinGroupPlans, RefusesGroupsThatDoNotCoverTheBatchOnceOnTheCluster) {
  const Workload workload =
      testing::small_workload(testing::random_batch(32), MaskKind::kCausal, 8, 2);
  const testing::TwoGroups two = testing::two_group_plans(workload, 2);
  const PlanOptions options = a100_plan_options(Strategy::kDcpPure, {2, 2});
  const auto joined_with = [&](std::vector<GroupPlan> groups) {
    return testing::invalid_input_text([&] { join_group_plans(workload, groups, options); });
  };
  EXPECT_NE(joined_with({two.groups[0]}).find("sequence 1 is in no group"), std::string::npos);

  // Overlapping inside the one node of a 1 x 4 cluster.
  std::vector<GroupPlan> overlapping = two.groups;
  overlapping[1].first_device = 1;
  const PlanOptions one_node = a100_plan_options(Strategy::kDcpPure, {1, 4});
  EXPECT_NE(testing::invalid_input_text([&] {
              join_group_plans(workload, overlapping, one_node);
            }).find("device 1 is in another group"),
            std::string::npos);

  std::vector<GroupPlan> outside = two.groups;
  outside[1].first_device = 3;
  EXPECT_NE(joined_with(outside).find("devices 3..4 are not all in the cluster's 4"),
            std::string::npos);

  // Both groups inside the one node of a 1 x 4 cluster: joined; over nodes of one device each,
  // a group of two devices spans two of them.
  EXPECT_EQ(testing::invalid_input_text([&] { join_group_plans(workload, two.groups, one_node); }),
            "");
  const PlanOptions four_nodes = a100_plan_options(Strategy::kDcpPure, {4, 1});
  EXPECT_NE(testing::invalid_input_text([&] {
              join_group_plans(workload, two.groups, four_nodes);
            }).find("group 0's 1 x 2 devices from device 0 are not whole nodes of the 4 x 1"),
            std::string::npos);

  std::vector<GroupPlan> twice = two.groups;
  twice[1].sequences[0] = 0;
  EXPECT_NE(joined_with(twice).find("sequence 0 is not in the batch or is in another group"),
            std::string::npos);

  std::vector<GroupPlan> swapped = two.groups;
  std::swap(swapped[1].sequences[0], swapped[1].sequences[1]);
  EXPECT_NE(joined_with(swapped).find("tokens, sequence 3 of the batch"), std::string::npos);

  std::vector<GroupPlan> missing = two.groups;
  missing[0].plan = nullptr;
  EXPECT_NE(joined_with(missing).find("group 0 has no plan"), std::string::npos);

  // Partials in another dtype than the joined plan's.
  PlanOptions fp32 = options;
  fp32.partial_dtype = DType::kFp32;
  EXPECT_NE(testing::invalid_input_text([&] {
              join_group_plans(workload, two.groups, fp32);
            }).find("partials travel in bf16, the plan's in fp32"),
            std::string::npos);
}

}  // namespace
}  // namespace dcp
