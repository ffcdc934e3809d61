// SPDX-License-Identifier: Apache-2.0
// The hybrid-attention suite: dcp's plan of every kind against re-dispatching between a placement
// per kind, one mask's placement for every layer and the static strategies; and the pieces its
// baselines are made of.
#include "apps/suites/kinds_suite.h"

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "dcp/model/cluster.h"
#include "dcp/model/cluster_presets.h"

#include "dcp/data/length_distribution.h"

#include "dcp/sim/network.h"

#include "tests/testing/text_counts.h"

namespace dcp::suites {
namespace {

using dcp::testing::count_of;

TEST(KindsSuite, ModelsCountTheirLayersAndChangesOfKind) {
  const std::vector<KindModel> models = default_kind_models();
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].layers(), (std::vector<std::int32_t>{8, 40}));
  // Five sliding layers, then a full one, eight times: 8 changes into full, 7 out of it.
  EXPECT_EQ(models[0].kind_changes(), 15);
  EXPECT_EQ(models[2].layers(), (std::vector<std::int32_t>{24, 24}));
  EXPECT_EQ(models[2].kind_changes(), 47);
}

TEST(KindsSuite, PricesARedistributionAsTheSimulatorPricesItsMessages) {
  ClusterSpec cluster = cluster_preset("a100-p4de");
  cluster.shape = {2, 2};
  // Token 0 stays; token 1 moves inside node 0 (device 0 -> 1); tokens 2 and 3 move from node 0
  // (device 1) to node 1 (device 2), in one message.
  const std::vector<DeviceId> from = {0, 0, 1, 1}, to = {0, 1, 2, 2};
  const std::int64_t bytes = 1000000;
  std::vector<std::int64_t> messages(16, 0);
  messages[0 * 4 + 1] = bytes;
  messages[1 * 4 + 2] = 2 * bytes;
  const double seconds = redistribution_seconds(from, to, bytes, cluster);
  EXPECT_DOUBLE_EQ(seconds, sim::exchange_seconds(messages, cluster));
  // Never below the busiest link side at its peak rate after one latency: the fitted stream
  // rates and message sizes only slow it.
  EXPECT_GT(seconds, 2 * bytes / cluster.nic_bandwidth() + cluster.inter_node_latency);
  EXPECT_EQ(redistribution_seconds(from, from, bytes, cluster), 0.0);
  EXPECT_THROW(redistribution_seconds(from, {0, 1, 2}, bytes, cluster), InvalidInput);
  EXPECT_THROW(redistribution_seconds(from, {0, 1, 2, 4}, bytes, cluster), InvalidInput);
}

TEST(KindsSuite, DcpIsNeverSlowerThanOneMasksPlacementOrAStaticStrategy) {
  KindsOptions options;
  options.datasets = {LengthDistributionKind::kLongDataCollections};
  options.scales = {1};
  options.models = {default_kind_models()[2]};
  options.batches = 1;
  options.tokens = 8192;
  options.cluster = cluster_preset("a100-p4de");
  options.cluster.shape = {2, 2};
  options.shape.head_dim = 32;
  options.threads = 1;
  std::ostringstream progress;
  const std::vector<KindsRecord> records = run_kinds_suite(options, progress);
  ASSERT_EQ(records.size(), 1u);
  const KindsRecord& r = records.front();
  EXPECT_GT(r.dcp_ms, 0);
  // dcp's search holds the one-mask placement and every static strategy as candidates.
  EXPECT_LE(r.dcp_ms, r.one_mask_ms * (1 + 1e-9));
  EXPECT_LE(r.dcp_ms, r.static_ms * (1 + 1e-9));
  EXPECT_GT(r.redispatch_moves_ms, 0);
  EXPECT_GT(r.redispatch_ms, r.redispatch_moves_ms);
  EXPECT_FALSE(r.static_strategy.empty());
  const std::string json = kinds_records_json(records);
  EXPECT_EQ(count_of(json, "\"dcp_ms\""), 1u);
  const std::string markdown = kinds_markdown(options, records, "dcp bench --suite kinds");
  EXPECT_NE(markdown.find("## alternating-w128"), std::string::npos);
  EXPECT_NE(markdown.find("## Targets"), std::string::npos);
  EXPECT_NE(markdown.find("dcp bench --suite kinds"), std::string::npos);
}

}  // namespace
}  // namespace dcp::suites
