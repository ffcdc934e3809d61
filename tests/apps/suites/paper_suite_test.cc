// SPDX-License-Identifier: Apache-2.0
// The paper suite: the paper's cells, the baselines' data parallel degree, the fit, and the suite
// end to end on a small cluster and small batches.
#include "apps/suites/paper_suite.h"

#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/cluster_file.h"

namespace dcp::suites {
namespace {

TEST(PaperSuite, HoldsEveryMeasuredCellOnceAndFitsOnlyTheLdcCausalBaselines) {
  const std::vector<PaperCell> cells = paper_cells();
  // Causal: 5 systems x 2 datasets x 2 passes; sparse: 2 systems x 3 masks x 2 datasets x 2
  // passes; 4 scales each.
  EXPECT_EQ(cells.size(), (20u + 24u) * 4u);
  std::set<std::tuple<std::string, double, std::string, std::string, std::string>> seen;
  int fitted = 0, outliers = 0;
  for (const PaperCell& c : cells) {
    EXPECT_TRUE(seen.insert({c.dataset, c.scale, c.mask, c.pass, c.strategy}).second)
        << c.dataset << " " << c.scale << " " << c.mask << " " << c.pass << " " << c.strategy;
    EXPECT_GT(c.paper_ms, 0);
    if (c.fitted) {
      ++fitted;
      EXPECT_EQ(c.dataset, "ldc");
      EXPECT_EQ(c.mask, "causal");
      EXPECT_NE(c.strategy, "dcp-reference");
    }
    outliers += c.outlier ? 1 : 0;
  }
  EXPECT_EQ(fitted, 4 * 4 * 2);  // ring, zigzag, loongtrain, te x 4 scales x 2 passes
  EXPECT_EQ(outliers, 2);
}

TEST(PaperSuite, ReportsEveryCellWithItsSimulatedTimeAndError) {
  PaperOptions options;
  options.batches = 1;
  options.tokens = 2048;
  options.shape.head_dim = 32;
  options.cluster =
      parse_cluster_text("preset = a100-p4de\nnodes = 2\ndevices_per_node = 2\n", "test");
  options.threads = 2;
  std::ostringstream progress;
  const std::vector<PaperRecord> paper_records = run_paper_suite(options, progress);
  const std::string records = paper_records_json(paper_records);
  // One record per cell, plus dcp's own plan beside each of the reference's cells.
  std::size_t count = 0;
  for (std::size_t at = records.find("\"simulated_ms\""); at != std::string::npos;
       at = records.find("\"simulated_ms\"", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, paper_cells().size() + 4u * 4u * 2u * 2u);
  for (const char* field :
       {"\"dataset\": \"ldc\"", "\"strategy\": \"loongtrain\"", "\"strategy\": \"dcp-reference\"",
        "\"strategy\": \"dcp-pure\"", "\"fitted\": true", "\"paper_ms\": 28.3", "\"window\": 1"}) {
    EXPECT_NE(records.find(field), std::string::npos) << field;
  }
  EXPECT_EQ(records.find("\"simulated_ms\": 0,"), std::string::npos);
  const std::string markdown = paper_markdown(options, paper_records, "dcp bench --suite paper");
  EXPECT_NE(markdown.find("| fitted (LongDataCollections causal baselines) | 31 |"),
            std::string::npos);
  EXPECT_NE(markdown.find("| ldc | x0.5 | causal | forward | ring | 28.3 |"), std::string::npos);
}

TEST(PaperSuite, GivesThePapersDcpSpeedUpOverItsFastestMeasuredBaseline) {
  // LDC x1 causal forward: DCP 7.0 ms, the fastest baseline LoongTrain at 14.8.
  EXPECT_DOUBLE_EQ(*paper_dcp_speedup("ldc", 1, "causal", "forward"), 14.8 / 7.0);
  // Sparse masks: TransformerEngine is the only baseline measured (LongAlign x4 lambda backward).
  EXPECT_DOUBLE_EQ(*paper_dcp_speedup("longalign", 4, "lambda", "backward"), 22.9 / 7.0);
  EXPECT_FALSE(paper_dcp_speedup("prolong", 1, "causal", "forward"));
  EXPECT_FALSE(paper_dcp_speedup("ldc", 8, "causal", "forward"));
}

TEST(PaperSuite, FitMovesOnlyTheNamedConstants) {
  PaperOptions options;
  options.batches = 1;
  options.tokens = 2048;
  options.shape.head_dim = 32;
  options.cluster =
      parse_cluster_text("preset = a100-p4de\nnodes = 2\ndevices_per_node = 2\n", "test");
  options.fit_parameters = {"sequence_overhead_us"};
  std::ostringstream progress;
  const PaperFit fit = fit_paper_constants(options, progress);
  EXPECT_LT(fit.rms_log_error_after, fit.rms_log_error_before);
  EXPECT_EQ(to_cluster_text(fit.cluster), to_cluster_text(options.cluster));
  // Miniature batches run far below the paper's milliseconds, so the host time per sequence of
  // the zigzag-style baselines rises; nothing else may move.
  EXPECT_GT(fit.zigzag_baselines.sequence_overhead, options.zigzag_baselines.sequence_overhead);
  EXPECT_EQ(fit.zigzag_baselines.instruction_overhead, 0);
  EXPECT_NE(progress.str().find("fit: sequence_overhead_us "), std::string::npos);
  EXPECT_EQ(progress.str().find("fit: forward_tflops "), std::string::npos);

  options.fit_parameters = {"sequence_overhead"};
  try {
    fit_paper_constants(options, progress);
    ADD_FAILURE() << "an unknown constant was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("no fitted constant named 'sequence_overhead'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("inter_stream_gbps, sequence_overhead_us"),
              std::string::npos)
        << e.what();
  }
}

TEST(PaperSuite, PricesHostTimePerSequenceOnlyForTheZigzagStyleBaselines) {
  for (const char* s : {"zigzag", "loongtrain", "te"}) EXPECT_TRUE(splits_sequences_on_host(s));
  for (const char* s : {"ring", "dcp-reference", "dcp-pure", "hybrid", "ulysses"}) {
    EXPECT_FALSE(splits_sequences_on_host(s)) << s;
  }
}

}  // namespace
}  // namespace dcp::suites
