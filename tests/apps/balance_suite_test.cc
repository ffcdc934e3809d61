// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite balance`: dcp-pure's plan of every batch at each compute balance, its bytes
// between nodes, imbalance and simulated time, and the summary against the first balance.
#include "apps/cli/balance_suite.h"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tests/apps/cli_testing.h"

namespace dcp::cli {
namespace {

TEST(BalanceSuite, PlansEveryBatchAtEveryBalanceAndComparesWithTheFirst) {
  const std::string dir = temp_path("balance_report");
  const std::string json = temp_path("balance.json");
  std::filesystem::remove_all(dir);
  const Result r = run({"bench", "--suite", "balance", "--batches", "2", "--tokens", "16384",
                        "--head-dim", "32", "--datasets", "longalign", "--scales", "1",
                        "--balances", "0.1,3", "--out-dir", dir, "--json", json});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string records = read_all(json);
  // 1 dataset x 1 scale x 1 mask (causal) x 2 batches x 2 balances.
  EXPECT_EQ(count_of(records, "\"forward_ms\""), 4u);
  EXPECT_EQ(count_of(records, "\"eps_compute\": 0.1,"), 2u);
  EXPECT_EQ(count_of(records, "\"eps_compute\": 3,"), 2u);
  EXPECT_EQ(count_of(records, "\"mask\": \"causal\""), 4u);
  EXPECT_EQ(records.find("\"forward_ms\": 0,"), std::string::npos);
  EXPECT_EQ(records.find("\"bytes_inter_node\": 0,"), std::string::npos);
  const std::string markdown = read_all(dir + "/balance_bench.md");
  EXPECT_NE(markdown.find("1.10 ×: inter-node MB | imbalance | ms |"), std::string::npos);
  EXPECT_NE(markdown.find("4.00 ×: inter-node MB | imbalance | ms |"), std::string::npos);
  // The first balance is the reference: its ratios are 1.
  EXPECT_NE(markdown.find("| 1.10 × | 1.00 × | 1.00 × |"), std::string::npos) << markdown;
  EXPECT_EQ(count_of(markdown, "| **"), 2u) << "one fastest per batch";
  std::filesystem::remove_all(dir);
}

TEST(BalanceSuite, RefusesBadBalancesAndFlagsItFixes) {
  expect_usage_error({"bench", "--suite", "balance", "--balances", "0.1,-1"},
                     "a balance must be in [0, 1000]");
  expect_usage_error({"bench", "--suite", "balance", "--strategies", "ring"},
                     "--strategies does not apply to --suite balance");
}

}  // namespace
}  // namespace dcp::cli
