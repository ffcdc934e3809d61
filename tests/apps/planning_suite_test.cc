// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite planning`: every batch planned with dcp-pure and dcp, timed, summarised as
// median, p90 and max per shape, dataset and mask.
#include "apps/cli/planning_suite.h"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tests/apps/cli_testing.h"

namespace dcp::cli {
namespace {

TEST(PlanningSuite, TimesEveryBatchWithBothStrategiesAndSummarisesThem) {
  const std::string dir = temp_path("planning_report");
  const std::string json = temp_path("planning.json");
  std::filesystem::remove_all(dir);
  const Result r = run({"bench", "--suite", "planning", "--batches", "3", "--tokens", "4096",
                        "--head-dim", "32", "--shapes", "1x4,2x2", "--masks", "causal,lambda",
                        "--datasets", "ldc", "--out-dir", dir, "--json", json});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string records = read_all(json);
  // 2 shapes x 1 dataset x 2 masks x 3 batches x 2 strategies.
  EXPECT_EQ(count_of(records, "\"plan_ms\""), 24u);
  EXPECT_EQ(count_of(records, "\"strategy\": \"dcp-pure\""), 12u);
  EXPECT_EQ(count_of(records, "\"kept\""), 12u);  // dcp says which plan it kept
  EXPECT_EQ(records.find("\"plan_ms\": 0,"), std::string::npos);
  // Batches go round-robin over the scales: the first three of x0.5, x1, x2, x4.
  EXPECT_NE(records.find("\"scale\": 2"), std::string::npos);
  EXPECT_EQ(records.find("\"scale\": 4"), std::string::npos);
  const std::string markdown = read_all(dir + "/planning_time.md");
  EXPECT_NE(markdown.find("| 1 × 4 | all | all | dcp | 6 |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| 2 × 2 | ldc | lambda | dcp-pure | 3 |"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(PlanningSuite, RefusesBadShapesAndFlagsItFixes) {
  expect_usage_error({"bench", "--suite", "planning", "--shapes", "4by8"},
                     "a shape is NODESxDEVICES, got '4by8'");
  expect_usage_error({"bench", "--suite", "planning", "--shapes", "0x8"}, "--shapes");
  expect_usage_error({"bench", "--suite", "planning", "--strategies", "ring"},
                     "--strategies does not apply to --suite planning");
  expect_usage_error({"bench", "--suite", "nope"},
                     "expected micro, paper, e2e, calibration, planning or balance");
}

}  // namespace
}  // namespace dcp::cli
