// SPDX-License-Identifier: Apache-2.0
// A model plan's kinds, executed on local ranks over the same inputs: each kind's o, lse, dq, dk
// and dv match dense fp64 attention under that kind's mask.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/selection/model_plan_search.h"

#include "tests/runtime/run_fixtures.h"

namespace dcp {
namespace {

TEST(KindRun, EveryKindMatchesDenseFp64AttentionUnderItsOwnMask) {
  const SequenceBatch batch = testing::runtime_batch(11);
  const AttentionShape shape = testing::runtime_shape(DType::kFp32);
  const std::vector<std::pair<std::string, MaskKind>> masks = {{"global", MaskKind::kCausal},
                                                               {"local", MaskKind::kSlidingWindow},
                                                               {"sink", MaskKind::kLambda}};
  std::vector<KindWorkload> kinds;
  for (const auto& [name, kind] : masks) {
    kinds.push_back(
        {name, name == "local" ? 5 : 1,
         Workload(shape, batch, build_batch_mask(testing::runtime_spec(kind), batch), 64, 1)});
  }
  for (const ClusterShape world : {ClusterShape{1, 2}, ClusterShape{2, 2}}) {
    for (const Strategy strategy : {Strategy::kDcp, Strategy::kDcpPure}) {
      const BuiltModelPlan built =
          build_model_plan(kinds, testing::runtime_plan_options(strategy, world));
      const runtime::BatchInputs inputs =
          runtime::random_inputs(testing::batch_shape(kinds.front().workload), 3);
      runtime::RunOptions options;
      options.kernel_threads = 1;
      for (std::size_t k = 0; k < kinds.size(); ++k) {
        const Workload& workload = built.kinds[k].workload;
        const runtime::RunResult result = runtime::run_plan_locally(
            built.plan.kinds[k].plan, workload.batch().offsets(), inputs, options);
        const runtime::OutputErrors errors = runtime::compare_outputs(
            inputs.shape, result.outputs,
            runtime::dense_reference(workload, inputs,
                                     built.plan.kinds[k].plan.header.softmax_scale, 2));
        const std::string what = std::string(to_string(strategy)) + " " + kinds[k].name + " on " +
                                 std::to_string(world.devices()) + " devices";
        EXPECT_EQ(errors.non_finite, 0) << what;
        EXPECT_EQ(errors.lse_mismatches, 0) << what;
        for (const double relative :
             {errors.o.relative(), errors.lse.relative(), errors.dq.relative(),
              errors.dk.relative(), errors.dv.relative()}) {
          EXPECT_LE(relative, 1e-4) << what;
        }
        EXPECT_GT(errors.o.max_reference, 0) << what;
        EXPECT_GT(errors.dk.max_reference, 0) << what;
      }
    }
  }
}

}  // namespace
}  // namespace dcp
