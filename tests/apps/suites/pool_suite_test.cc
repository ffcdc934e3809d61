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
  // Which layouts run a static strategy's schedule in a group: the fixed layouts' groups always,
  // dynamic CP's where a group has more than one device (TransformerEngine's), dcp's groups and
  // the pool where dcp kept a static candidate (named in the detail).
  EXPECT_TRUE(r.fixed4.runs_static);
  EXPECT_TRUE(r.fixed8.runs_static);
  EXPECT_EQ(r.dynamic.runs_static, r.dynamic.detail.find(" x CP1") == std::string::npos ||
                                       r.dynamic.detail.find(", ") != std::string::npos)
      << r.dynamic.detail;
  // A detail names each group's kept plan: "dcp x2, ulysses x1" (a layout) or "dcp" (the pool).
  const auto names_static = [](const std::string& detail) {
    std::istringstream items(detail.substr(0, detail.find(';')));
    for (std::string item; std::getline(items, item, ',');) {
      item.erase(0, item.find_first_not_of(' '));
      const std::string name = item.substr(0, item.find(" x"));
      if (std::any_of(std::begin(kStaticStrategies), std::end(kStaticStrategies),
                      [&](Strategy strategy) { return to_string(strategy) == name; })) {
        return true;
      }
    }
    return false;
  };
  EXPECT_EQ(r.dcp_groups.runs_static, names_static(r.dcp_groups.detail)) << r.dcp_groups.detail;
  EXPECT_EQ(r.pool.runs_static, names_static(r.pool.detail)) << r.pool.detail;
  const std::string md = pool_markdown(options, records, "dcp bench --suite pool");
  EXPECT_NE(md.find("(simulated)"), std::string::npos);
  EXPECT_NE(md.find("| a100-p4de | 16 | megatron | 512 |"), std::string::npos);
  EXPECT_NE(pool_records_json(records).find("\"dcp_pool\""), std::string::npos);
}

// The every-batch target counts the micro-batches the pool trails, and those where the faster
// layout runs a static strategy's schedule in some group.
TEST(PoolSuite, TheReportCountsTheBatchesThePoolTrailsAndWhereAStaticScheduleWins) {
  PoolOptions options;
  const auto layout = [](double ms, bool runs_static) {
    LayoutStep step;
    step.ms = ms;
    step.runs_static = runs_static;
    return step;
  };
  const auto record = [&](std::int32_t batch, double pool_ms, bool faster_runs_static) {
    PoolRecord r;
    r.cluster = "a100-p4de";
    r.devices = 16;
    r.dataset = "megatron";
    r.batch = batch;
    r.tokens = 16 * 2000;
    r.device_tokens = 2048;
    r.fixed4 = layout(120, true);
    r.fixed8 = layout(110, true);
    r.dynamic = layout(130, true);
    r.dcp_groups = layout(100, faster_runs_static);
    r.pool = layout(pool_ms, false);
    return r;
  };
  std::vector<PoolRecord> records = {record(0, 95, true), record(1, 101, true),
                                     record(2, 102, false)};
  EXPECT_EQ(records[1].best_baseline(), &records[1].dcp_groups);
  EXPECT_NE(pool_markdown(options, records, "dcp bench --suite pool")
                .find("every micro-batch: **missed** (behind on 2 of 3; on 1 of them the faster "
                      "layout runs a static strategy's schedule in a group"),
            std::string::npos);
  records.resize(1);
  EXPECT_NE(
      pool_markdown(options, records, "dcp bench --suite pool").find("every micro-batch: met\n"),
      std::string::npos);
}

}  // namespace
}  // namespace dcp::suites
