// SPDX-License-Identifier: Apache-2.0
// The fit of cost-model constants to measured plan times: it recovers a constant the times were
// simulated with, moves only the constants named, and refuses names and inputs it cannot use.
#include "dcp/calibration/plan_time_fit.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/cluster_file.h"
#include "dcp/model/cluster_presets.h"

#include "dcp/sim/simulator.h"

#include "tests/testing/sample_plan.h"

namespace dcp::calibration {
namespace {

ClusterSpec two_devices() {
  ClusterSpec cluster = cluster_preset("a100-p4de");
  cluster.shape = {1, 2};
  return cluster;
}

// The sample plan priced once with `executor` (when `priced`), its times under `truth` taken as
// measured, fitted from `start` moving `parameters` only.
PlanTimeFitInput input_measured_under(const ClusterSpec& truth, const ClusterSpec& start,
                                      const sim::ExecutorModel& executor, bool priced,
                                      std::vector<std::string> parameters) {
  PlanTimeFitInput input;
  input.cluster = start;
  input.executor = executor;
  input.plans = {testing::sample_plan()};
  input.priced_with_executor = {priced};
  const sim::PlanSimulation measured =
      sim::simulate(input.plans[0], truth, priced ? executor : sim::ExecutorModel{});
  input.measured = {{measured.forward.seconds * 1e3, Pass::kForward, {0}},
                    {measured.backward.seconds * 1e3, Pass::kBackward, {0}}};
  input.parameters = std::move(parameters);
  return input;
}

TEST(PlanTimeFit, RecoversTheKernelOverheadTheTimesWereSimulatedWith) {
  ClusterSpec truth = two_devices();
  truth.kernel_overhead = 40e-6;
  ClusterSpec start = truth;
  start.kernel_overhead = 10e-6;
  std::ostringstream progress;
  const PlanTimeFit fit = fit_plan_times(
      input_measured_under(truth, start, {}, false, {"kernel_overhead_us"}), progress);
  EXPECT_GT(fit.rms_log_error_before, 0.01);
  EXPECT_LT(fit.rms_log_error_after, fit.rms_log_error_before / 4);
  EXPECT_NEAR(fit.cluster.kernel_overhead, truth.kernel_overhead, 0.1 * truth.kernel_overhead);
  EXPECT_GT(fit.evaluations, 1);
  // Nothing else moves: the fitted spec is the start with the true overhead's neighbourhood.
  ClusterSpec expected = start;
  expected.kernel_overhead = fit.cluster.kernel_overhead;
  EXPECT_EQ(to_cluster_text(fit.cluster), to_cluster_text(expected));
  EXPECT_NE(progress.str().find("fit: kernel_overhead_us 10 -> "), std::string::npos)
      << progress.str();
}

TEST(PlanTimeFit, FitsTheExecutorsHostTimePerSequenceOnlyOnThePlansItPrices) {
  const ClusterSpec cluster = two_devices();
  sim::ExecutorModel truth;
  truth.sequence_overhead = 200e-6;
  sim::ExecutorModel start;
  start.sequence_overhead = 20e-6;
  std::ostringstream progress;
  PlanTimeFitInput input =
      input_measured_under(cluster, cluster, truth, true, {"sequence_overhead_us"});
  input.executor = start;
  const PlanTimeFit fit = fit_plan_times(input, progress);
  EXPECT_LT(fit.rms_log_error_after, fit.rms_log_error_before);
  EXPECT_GT(fit.executor.sequence_overhead, start.sequence_overhead);

  // A plan priced with dcp's own executor has no host time per sequence to fit.
  input = input_measured_under(cluster, cluster, start, false, {"sequence_overhead_us"});
  const PlanTimeFit unpriced = fit_plan_times(input, progress);
  EXPECT_DOUBLE_EQ(unpriced.executor.sequence_overhead, start.sequence_overhead);
  EXPECT_EQ(unpriced.rms_log_error_after, unpriced.rms_log_error_before);
}

TEST(PlanTimeFit, NamesItsConstantsAndRefusesOthers) {
  const std::vector<std::string> names = plan_time_fit_constants();
  ASSERT_EQ(names.size(), 11u);
  EXPECT_EQ(names.front(), "forward_tflops");
  EXPECT_EQ(names.back(), "sequence_overhead_us");
  check_plan_time_fit_constants(names);
  const std::vector<std::string> unknown = {"forward_tflops", "sequence_overhead"};
  try {
    check_plan_time_fit_constants(unknown);
    ADD_FAILURE() << "an unknown constant was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("no fitted constant named 'sequence_overhead' (the "
                                         "constants: forward_tflops, backward_tflops, "),
              std::string::npos)
        << e.what();
  }
  std::ostringstream progress;
  PlanTimeFitInput input =
      input_measured_under(two_devices(), two_devices(), {}, false, {"sequence_overhead"});
  EXPECT_THROW(fit_plan_times(input, progress), InvalidInput);
  input.parameters.clear();
  input.measured[0].plans = {1};  // no such plan
  EXPECT_THROW(fit_plan_times(input, progress), InvalidInput);
  input.measured[0].plans = {0};
  input.priced_with_executor.clear();
  EXPECT_THROW(fit_plan_times(input, progress), InvalidInput);
}

}  // namespace
}  // namespace dcp::calibration
