// SPDX-License-Identifier: Apache-2.0
// The balance suite: dcp-pure's plan of every batch at each compute balance, its bytes between
// nodes, imbalance and simulated time, and the summary against the first balance.
#include "apps/suites/balance_suite.h"

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

TEST(BalanceSuite, PlansEveryBatchAtEveryBalanceAndComparesWithTheFirst) {
  BalanceOptions options;
  options.datasets = {LengthDistributionKind::kLongAlign};
  options.scales = {1};
  options.masks = {parse_mask_spec("causal")};
  options.balances = {0.1, 3};
  options.batches = 2;
  options.tokens = 16384;
  options.cluster = cluster_preset("a100-p4de");
  options.shape.head_dim = 32;
  options.threads = 2;
  std::ostringstream progress;
  const std::vector<BalanceSample> samples = run_balance_suite(options, progress);
  const std::string records = balance_samples_json(samples);
  // 1 dataset x 1 scale x 1 mask (causal) x 2 batches x 2 balances.
  EXPECT_EQ(count_of(records, "\"forward_ms\""), 4u);
  EXPECT_EQ(count_of(records, "\"eps_compute\": 0.1,"), 2u);
  EXPECT_EQ(count_of(records, "\"eps_compute\": 3,"), 2u);
  EXPECT_EQ(count_of(records, "\"mask\": \"causal\""), 4u);
  EXPECT_EQ(records.find("\"forward_ms\": 0,"), std::string::npos);
  EXPECT_EQ(records.find("\"bytes_inter_node\": 0,"), std::string::npos);
  const std::string markdown = balance_markdown(options, samples, "dcp bench --suite balance");
  EXPECT_NE(markdown.find("1.10 ×: inter-node MB | imbalance | ms |"), std::string::npos);
  EXPECT_NE(markdown.find("4.00 ×: inter-node MB | imbalance | ms |"), std::string::npos);
  // The first balance is the reference: its ratios are 1.
  EXPECT_NE(markdown.find("| 1.10 × | 1.00 × | 1.00 × |"), std::string::npos) << markdown;
  EXPECT_EQ(count_of(markdown, "| **"), 2u) << "one fastest per batch";
}

}  // namespace
}  // namespace dcp::suites
