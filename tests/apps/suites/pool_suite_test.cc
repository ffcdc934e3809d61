// SPDX-License-Identifier: Apache-2.0
// The pool suite's layouts: Megatron-style group sizes, samples dealt by work within a group's
// tokens, the dynamic layout's groups and rounds, and one small run of every layout.
#include "apps/suites/pool_suite.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"

#include "dcp/model/cluster_presets.h"

#include "dcp/data/length_distribution.h"

#include "dcp/planner/strategy.h"

namespace dcp::suites {
namespace {

TEST(PoolSuite, DynamicGroupIsTheSmallestPowerOfTwoThatHoldsTheSample) {
  EXPECT_EQ(dynamic_group_size(1, 2048), 1);
  EXPECT_EQ(dynamic_group_size(2048, 2048), 1);
  EXPECT_EQ(dynamic_group_size(2049, 2048), 2);
  EXPECT_EQ(dynamic_group_size(4096, 2048), 2);
  EXPECT_EQ(dynamic_group_size(4097, 2048), 4);
  EXPECT_EQ(dynamic_group_size(8192, 2048), 4);
  EXPECT_THROW(dynamic_group_size(0, 2048), InvalidInput);
}

TEST(PoolSuite, DynamicLayoutPutsEverySampleOnceInGroupsThatHoldIt) {
  const sim::TransformerConfig model = pool_model();
  const std::vector<TokenCount> lengths = {8000, 5000, 3000, 2048, 1500, 900, 700, 300, 200, 100};
  const auto rounds = dynamic_layout(lengths, 8, 2048, model);
  ASSERT_FALSE(rounds.empty());
  std::set<std::size_t> seen;
  for (const auto& round : rounds) {
    std::int32_t used = 0;
    for (const DynamicGroup& group : round) {
      used += group.devices;
      TokenCount tokens = 0;
      for (const std::size_t i : group.samples) {
        EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
        EXPECT_EQ(dynamic_group_size(lengths[i], 2048), group.devices) << "sample " << i;
        tokens += lengths[i];
      }
      EXPECT_LE(tokens, static_cast<TokenCount>(group.devices) * 2048);
    }
    EXPECT_LE(used, 8);
  }
  EXPECT_EQ(seen.size(), lengths.size());
  // 8000 and 5000 take four devices each: the first round has no device left for the others,
  // which wait for a second round.
  EXPECT_EQ(rounds.size(), 2u);
  EXPECT_THROW(dynamic_layout({20000}, 8, 2048, model), InvalidInput);
}

TEST(PoolSuite, ASmallRunComparesEveryLayoutOnEveryBatch) {
  PoolOptions options;
  options.model = pool_model();
  options.model.layers = 2;
  options.clusters = {cluster_preset("a100-p4de")};
  options.pool_devices = {16};
  options.workloads = {{LengthDistributionKind::kMegatronLogNormal, 512}};
  options.batches = 1;
  std::ostringstream progress;
  const std::vector<PoolRecord> records = run_pool_suite(options, progress);
  ASSERT_EQ(records.size(), 1u);
  const PoolRecord& r = records.front();
  EXPECT_EQ(r.devices, 16);
  EXPECT_GT(r.tokens, 16 * 512 * 3 / 4);  // packed to at least the packing's fill
  EXPECT_LE(r.tokens, 16 * 512);
  for (const LayoutStep* step : {&r.fixed8, &r.dynamic, &r.pool}) {
    EXPECT_GT(step->ms, 0);
    EXPECT_GT(step->max_device_tokens, 0);
  }
  EXPECT_TRUE(r.dynamic.fits);
  EXPECT_LT(r.best_baseline_ms(), std::numeric_limits<double>::infinity());
  // The share of tokens carried over: named in the detail where there is one; the pool holds all.
  for (const LayoutStep* step : {&r.fixed4, &r.fixed8, &r.dynamic, &r.dcp_groups, &r.pool}) {
    EXPECT_GE(step->carried, 0);
    EXPECT_LT(step->carried, 1);
    EXPECT_EQ(step->carried > 0, step->detail.find("carried over") != std::string::npos)
        << step->detail;
  }
  EXPECT_EQ(r.pool.carried, 0);
  const std::string md = pool_markdown(options, records, "dcp bench --suite pool");
  EXPECT_NE(md.find("(simulated)"), std::string::npos);
  EXPECT_NE(md.find("| a100-p4de | 16 | megatron | 512 |"), std::string::npos);
  EXPECT_NE(pool_records_json(records).find("\"dcp_pool\""), std::string::npos);
}

// The every-batch target counts the micro-batches the pool trails, its least ratio to the
// fastest layout, and how many of those layouts carry tokens over.
TEST(PoolSuite, TheReportCountsTheBatchesThePoolTrailsAndWhereTheFasterCarriesTokensOver) {
  PoolOptions options;
  const auto layout = [](double ms, double carried) {
    LayoutStep step;
    step.ms = ms;
    step.carried = carried;
    return step;
  };
  const auto record = [&](std::int32_t batch, double pool_ms, double faster_carries) {
    PoolRecord r;
    r.cluster = "a100-p4de";
    r.devices = 16;
    r.dataset = "megatron";
    r.batch = batch;
    r.tokens = 16 * 2000;
    r.device_tokens = 2048;
    r.fixed4 = layout(120, 0);
    r.fixed8 = layout(110, 0);
    r.dynamic = layout(130, 0.1);
    r.dcp_groups = layout(100, faster_carries);
    r.pool = layout(pool_ms, 0);
    return r;
  };
  std::vector<PoolRecord> records = {record(0, 95, 0.01), record(1, 101, 0.01), record(2, 125, 0)};
  EXPECT_EQ(records[1].best_baseline(), &records[1].dcp_groups);
  EXPECT_NE(pool_markdown(options, records, "dcp bench --suite pool")
                .find("every micro-batch: **missed** (behind on 2 of 3, at least 0.800 of the "
                      "best; on 1 of them the faster layout carries tokens over"),
            std::string::npos);
  records.resize(1);
  EXPECT_NE(
      pool_markdown(options, records, "dcp bench --suite pool").find("every micro-batch: met\n"),
      std::string::npos);
}

// The fixed groups' deal: every sample in at most one group within the group's tokens at the
// bound; a sample longer than that but within 1.2 x runs in a group of its own, one longer still
// in none (it carries over); bad group sizes are refused.
TEST(PoolSuite, FixedGroupsDealSamplesWithinTheBoundAndAnOversizeOneAlone) {
  const sim::TransformerConfig model = pool_model();
  const std::vector<TokenCount> lengths = {9000, 12000, 3000, 2500, 2000, 1500, 800, 400, 300};
  const auto shares = fixed_group_shares(model, lengths, 16, 4, 2048);
  ASSERT_EQ(shares.size(), 4u);
  std::set<std::size_t> seen;
  bool alone = false;
  for (const auto& share : shares) {
    TokenCount tokens = 0;
    for (const std::size_t i : share) {
      EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
      tokens += lengths[i];
    }
    if (share == std::vector<std::size_t>{0}) {
      alone = true;  // 9000 > 4 x 2048, within 4 x 2457
    } else {
      EXPECT_LE(tokens, 4 * 2048);
    }
  }
  EXPECT_TRUE(alone);
  EXPECT_FALSE(seen.contains(1));  // 12000 > 4 x 2457: no group holds it
  EXPECT_EQ(seen.size(), lengths.size() - 1);
  EXPECT_THROW(fixed_group_shares(model, lengths, 16, 3, 2048), InvalidInput);
  EXPECT_THROW(fixed_group_shares(model, lengths, 16, 4, 0), InvalidInput);
}

}  // namespace
}  // namespace dcp::suites
