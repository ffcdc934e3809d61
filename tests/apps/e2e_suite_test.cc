// SPDX-License-Identifier: Apache-2.0
// `dcp bench --suite e2e`: the paper's end-to-end cells, and the estimate end to end on a
// miniature of its batches.
#include "apps/cli/e2e_suite.h"

#include <filesystem>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "tests/apps/cli_testing.h"

namespace dcp::cli {
namespace {

TEST(E2eSuite, HoldsEveryMeasuredCellOnceWithTheReferencesBlockSizes) {
  const std::vector<E2eCell> cells = e2e_cells();
  EXPECT_EQ(cells.size(), 2u * 4u * 4u);  // datasets x lengths x masks
  std::set<std::tuple<std::string, TokenCount, std::string>> seen;
  for (const E2eCell& c : cells) {
    EXPECT_TRUE(seen.insert({c.dataset, c.max_seq_len, c.mask}).second);
    EXPECT_GT(c.mlm_seconds, 1);
    EXPECT_GT(c.dcp_seconds, 1);
    const TokenCount expected = c.max_seq_len == 16384                                    ? 512
                                : c.max_seq_len < 131072                                  ? 1024
                                : c.dataset == "longalign" && c.mask == "shared_question" ? 4096
                                                                                          : 2048;
    EXPECT_EQ(c.dcp_block_size, expected) << c.dataset << " " << c.max_seq_len << " " << c.mask;
  }
}

TEST(E2eSuite, EstimatesEveryCellForEverySystemAndFitsOnlyMegatronsCausalCells) {
  const std::string dir = temp_path("e2e_report");
  const std::string json = temp_path("e2e.json");
  std::filesystem::remove_all(dir);
  const Result r = run({"bench", "--suite", "e2e", "--batches", "1", "--tokens", "1024",
                        "--threads", "2", "--out-dir", dir, "--json", json});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string records = read_all(json);
  std::size_t count = 0, fitted = 0;
  for (std::size_t at = records.find("\"estimated_seconds\""); at != std::string::npos;
       at = records.find("\"estimated_seconds\"", at + 1)) {
    ++count;
  }
  for (std::size_t at = records.find("\"fitted\": true"); at != std::string::npos;
       at = records.find("\"fitted\": true", at + 1)) {
    ++fitted;
  }
  EXPECT_EQ(count, e2e_cells().size() * 3);  // mlm, dcp-reference, dcp
  EXPECT_EQ(fitted, 8u);
  for (const char* field :
       {"\"system\": \"mlm\"", "\"system\": \"dcp-reference\"", "\"system\": \"dcp\"",
        "\"paper_seconds\": 3.033", "\"dense_tflops\": ", "\"fixed_seconds\": "}) {
    EXPECT_NE(records.find(field), std::string::npos) << field;
  }
  EXPECT_EQ(records.find("\"estimated_seconds\": 0,"), std::string::npos);
  const std::string markdown = read_all(dir + "/e2e_estimate.md");
  EXPECT_NE(markdown.find("**An estimate, not a measurement.**"), std::string::npos);
  EXPECT_NE(markdown.find("| fitted: Megatron causal | 8 |"), std::string::npos);
  EXPECT_NE(markdown.find("| ldc | 128K | causal | 3.033 |"), std::string::npos);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(json);
}

TEST(E2eSuite, RefusesFlagsItsModelFixes) {
  expect_usage_error({"bench", "--suite", "e2e", "--masks", "causal"},
                     "--masks does not apply to --suite e2e");
  expect_usage_error({"bench", "--suite", "e2e", "--heads", "4"}, "--heads does not apply");
  expect_usage_error({"bench", "--suite", "e2e", "--tokens", "100"}, "--tokens");
}

}  // namespace
}  // namespace dcp::cli
