// SPDX-License-Identifier: Apache-2.0
// The planning suite: every batch planned with dcp-pure and dcp, timed, summarised as median,
// p90 and max per shape, dataset and mask.
#include "apps/suites/planning_suite.h"

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "dcp/model/cluster_presets.h"
#include "dcp/model/mask_spec.h"

#include "dcp/data/length_distribution.h"

#include "tests/testing/text_counts.h"

namespace dcp::suites {
namespace {

using dcp::testing::count_of;

TEST(PlanningSuite, TimesEveryBatchWithBothStrategiesAndSummarisesThem) {
  PlanningOptions options;
  options.shapes = {{1, 4}, {2, 2}};
  options.datasets = {LengthDistributionKind::kLongDataCollections};
  options.scales = {0.5, 1, 2, 4};
  options.masks = {parse_mask_spec("causal"), parse_mask_spec("lambda")};
  options.batches = 3;
  options.tokens = 4096;
  options.cluster = cluster_preset("a100-p4de");
  options.shape.head_dim = 32;
  std::ostringstream progress;
  const std::vector<PlanningSample> samples = run_planning_suite(options, progress);
  const std::string records = planning_samples_json(samples);
  // 2 shapes x 1 dataset x 2 masks x 3 batches x 2 strategies.
  EXPECT_EQ(count_of(records, "\"plan_ms\""), 24u);
  EXPECT_EQ(count_of(records, "\"strategy\": \"dcp-pure\""), 12u);
  EXPECT_EQ(count_of(records, "\"kept\""), 12u);  // dcp says which plan it kept
  EXPECT_EQ(records.find("\"plan_ms\": 0,"), std::string::npos);
  // Batches go round-robin over the scales: the first three of x0.5, x1, x2, x4.
  EXPECT_NE(records.find("\"scale\": 2"), std::string::npos);
  EXPECT_EQ(records.find("\"scale\": 4"), std::string::npos);
  const std::string markdown = planning_markdown(options, samples, "dcp bench --suite planning");
  EXPECT_NE(markdown.find("| 1 × 4 | all | all | dcp | 6 |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| 2 × 2 | ldc | lambda | dcp-pure | 3 |"), std::string::npos);
}

}  // namespace
}  // namespace dcp::suites
