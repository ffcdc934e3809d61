// SPDX-License-Identifier: Apache-2.0
// The step-time model: the paper's GPT 8B counted by hand, the tensor-parallel groups' cluster,
// the parts of a step, and the fit recovering the rates it was made from.
#include "dcp/sim/step_model.h"

#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/cluster_presets.h"

namespace dcp::sim {
namespace {

TEST(StepModel, CountsThePaperModelsWeightsAndFlopsByHand) {
  const TransformerConfig m = paper_gpt_8b();
  // Per layer: QKV 4096 x (4096 + 2 x 1024), output 4096 x 4096, gated FFN 3 x 4096 x 14336.
  const std::int64_t layer = 4096LL * 6144 + 4096LL * 4096 + 3LL * 4096 * 14336;
  EXPECT_EQ(layer, 218103808);
  EXPECT_EQ(m.parameters(), 32 * layer + 2LL * 50688 * 4096);
  EXPECT_DOUBLE_EQ(m.dense_forward_flops_per_token(), 2.0 * (32 * layer + 50688.0 * 4096));
  EXPECT_EQ(m.head_dim(), 128);
  EXPECT_EQ(m.kv_dim(), 1024);
}

TEST(StepModel, RefusesAModelTensorParallelismCannotSplit) {
  TransformerConfig m = paper_gpt_8b();
  m.tensor_parallel = 16;  // 8 kv heads
  EXPECT_THROW(validate(m), InvalidInput);
  m = paper_gpt_8b();
  m.kv_heads = 5;  // does not divide 32 heads
  EXPECT_THROW(validate(m), InvalidInput);
  m = paper_gpt_8b();
  m.layers = 0;
  EXPECT_THROW(validate(m), InvalidInput);
}

TEST(StepModel, GroupsOfTensorParallelGpusShareTheirNodesNetwork) {
  ClusterSpec gpus = cluster_preset("a100-p4de");
  gpus.shape = {8, 8};
  const ClusterSpec groups = tensor_parallel_groups(gpus, 4);
  EXPECT_EQ(groups.shape.nodes, 8);
  EXPECT_EQ(groups.shape.devices_per_node, 2);
  EXPECT_DOUBLE_EQ(groups.inter_node_bandwidth, gpus.inter_node_bandwidth / 4);
  EXPECT_EQ(groups.nics_per_node, 2);  // the two groups use different interfaces
  EXPECT_DOUBLE_EQ(groups.intra_node_bandwidth, gpus.intra_node_bandwidth);
  EXPECT_NO_THROW(validate(groups));
  EXPECT_THROW(tensor_parallel_groups(gpus, 3), InvalidInput);
}

TEST(StepModel, AddsAttentionDenseWorkCollectivesAndTheFixedTime) {
  const TransformerConfig m = paper_gpt_8b();
  ClusterSpec gpus = cluster_preset("a100-p4de");
  gpus.intra_node_efficiency.clear();
  const StepRates rates{100e12, 0.5};
  const StepTime t = step_time(m, rates, gpus, 8192, 0.010, 0.020);
  // Recomputation runs attention's forward twice.
  EXPECT_DOUBLE_EQ(t.attention, 32 * (2 * 0.010 + 0.020));
  EXPECT_NEAR(t.dense, 8192 * m.dense_forward_flops_per_token() * 4 / 4 / 100e12, 1e-12);
  // 12 collectives per layer, each 3 ring steps of 8192 x 4096 x 2 / 4 bytes.
  const double step = gpus.intra_node_latency + 8192.0 * 4096 * 2 / 4 / gpus.intra_node_bandwidth;
  EXPECT_NEAR(t.tensor_parallel, 32 * 12 * 3 * step, 1e-12);
  EXPECT_DOUBLE_EQ(t.fixed, 0.5);
  EXPECT_DOUBLE_EQ(t.total(), t.attention + t.dense + t.tensor_parallel + t.fixed);
  EXPECT_THROW(step_time(m, {0, 0.5}, gpus, 8192, 0, 0), InvalidInput);
}

TEST(StepModel, FitRecoversTheRatesTheStepsWereMadeWith) {
  const TransformerConfig m = paper_gpt_8b();
  const ClusterSpec gpus = cluster_preset("a100-p4de");
  const StepRates truth{140e12, 0.9};
  std::vector<MeasuredStep> steps;
  for (const double tokens : {1024.0, 2048.0, 4096.0, 8192.0}) {
    const double forward = 1e-6 * tokens / 4, backward = 2.5e-6 * tokens / 4;
    steps.push_back(
        {step_time(m, truth, gpus, tokens, forward, backward).total(), tokens, forward, backward});
  }
  const StepRates fitted = fit_step_rates(m, gpus, steps, 312e12);
  EXPECT_NEAR(fitted.dense_flops / truth.dense_flops, 1, 1e-9);
  EXPECT_NEAR(fitted.fixed_seconds, truth.fixed_seconds, 1e-9);
}

TEST(StepModel, FitKeepsTheFixedTimeNonNegativeAndTheRateAtMostThePeak) {
  const TransformerConfig m = paper_gpt_8b();
  const ClusterSpec gpus = cluster_preset("a100-p4de");
  // Steps that would need a negative fixed time: refitted through the origin. Dense work per
  // token on one GPU at 100 TFLOP/s (forward, recomputed forward, backward over TP 4).
  const double per_token = m.dense_forward_flops_per_token() * 4 / 4 / 100e12;
  std::vector<MeasuredStep> steps = {{1000 * per_token - 0.2, 1000, 0, 0},
                                     {4000 * per_token - 0.2, 4000, 0, 0}};
  const StepRates fitted = fit_step_rates(m, gpus, steps, 312e12);
  EXPECT_EQ(fitted.fixed_seconds, 0);
  EXPECT_GT(fitted.dense_flops, 0);
  EXPECT_FALSE(fitted.at_peak);
  // Steps that shrink as their work grows: no positive rate, so the rate is held at the peak and
  // the fixed time is what is left on average.
  steps = {{2.0, 1000, 0, 0}, {1.0, 4000, 0, 0}};
  const StepRates held = fit_step_rates(m, gpus, steps, 312e12);
  EXPECT_TRUE(held.at_peak);
  EXPECT_EQ(held.dense_flops, 312e12);
  const StepTime a = step_time(m, {312e12, 0}, gpus, 1000, 0, 0);
  const StepTime b = step_time(m, {312e12, 0}, gpus, 4000, 0, 0);
  EXPECT_NEAR(held.fixed_seconds, (2.0 + 1.0 - a.total() - b.total()) / 2, 1e-12);
  EXPECT_THROW(fit_step_rates(m, gpus, steps, 0), InvalidInput);
  // One step, or steps of equal work: nothing to fit.
  EXPECT_THROW(fit_step_rates(m, gpus, std::vector<MeasuredStep>{{1, 1000, 0, 0}}, 312e12),
               InvalidInput);
  steps = {{1.0, 1000, 0, 0}, {1.1, 1000, 0, 0}};
  EXPECT_THROW(fit_step_rates(m, gpus, steps, 312e12), InvalidInput);
}

// Per pass, the slowest device's attention plus its share of the rest (a third forward, two thirds
// backward): a device with little attention and many tokens can set a pass, and the step lies
// between the passes alone and the passes plus the largest rest.
TEST(StepModel, LockstepLayerEndsEachPassWithItsSlowestDevice) {
  // Device 0: the longest attention; device 1: the most tokens.
  const std::vector<DeviceLayer> devices = {{4.0, 8.0, 3.0}, {1.0, 2.0, 12.0}};
  // Forward: max(4 + 1, 1 + 4) = 5; backward: max(8 + 2, 2 + 8) = 10.
  EXPECT_DOUBLE_EQ(lockstep_layer_seconds(devices), 15.0);
  const std::vector<DeviceLayer> heavy = {{4.0, 8.0, 3.0}, {1.0, 2.0, 30.0}};
  // Forward: max(5, 11) = 11; backward: max(10, 22) = 22.
  EXPECT_DOUBLE_EQ(lockstep_layer_seconds(heavy), 33.0);
  // Its passes apart: the sum is the layer's.
  EXPECT_DOUBLE_EQ(lockstep_passes(heavy).forward, 11.0);
  EXPECT_DOUBLE_EQ(lockstep_passes(heavy).backward, 22.0);
  EXPECT_DOUBLE_EQ(lockstep_passes(devices).forward, 5.0);
  EXPECT_DOUBLE_EQ(lockstep_passes(devices).backward, 10.0);
  EXPECT_GE(lockstep_layer_seconds(heavy), 4.0 + 8.0);
  EXPECT_LE(lockstep_layer_seconds(heavy), 4.0 + 8.0 + 30.0);
  EXPECT_THROW(lockstep_layer_seconds({}), InvalidInput);
  const std::vector<DeviceLayer> negative = {{1.0, -1.0, 0.0}};
  EXPECT_THROW(lockstep_layer_seconds(negative), InvalidInput);
  EXPECT_THROW(lockstep_passes(negative), InvalidInput);
}

}  // namespace
}  // namespace dcp::sim
