// SPDX-License-Identifier: Apache-2.0
// The e2e suite: the paper's end-to-end cells, and the estimate end to end on a miniature of its
// batches.
#include "apps/suites/e2e_suite.h"

#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "dcp/core/ids.h"

#include "dcp/model/cluster_presets.h"

namespace dcp::suites {
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
  E2eOptions options;
  options.batches = 1;
  options.tokens = 1024;
  options.gpus = cluster_preset("a100-p4de");
  options.gpus.shape = {8, 8};  // the paper's 8 x p4d
  options.threads = 2;
  std::ostringstream progress;
  const E2eResult result = run_e2e_suite(options, progress);
  const std::string records = e2e_records_json(result);
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
  const std::string markdown = e2e_markdown(options, result, "dcp bench --suite e2e");
  EXPECT_NE(markdown.find("**An estimate, not a measurement.**"), std::string::npos);
  EXPECT_NE(markdown.find("| fitted: Megatron causal | 8 |"), std::string::npos);
  EXPECT_NE(markdown.find("| ldc | 128K | causal | 3.033 |"), std::string::npos);
}

}  // namespace
}  // namespace dcp::suites
