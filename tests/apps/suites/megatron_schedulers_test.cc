// SPDX-License-Identifier: Apache-2.0
// Megatron's DP-balanced and dynamic CP schedulers, as ported for the pool suite.
#include "apps/suites/megatron_schedulers.h"

#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

namespace dcp::suites {
namespace {

using Bins = std::vector<std::vector<std::size_t>>;

TEST(MegatronSchedulers, PadsToAMultiple) {
  EXPECT_EQ(padded(1, 8), 8);
  EXPECT_EQ(padded(8, 8), 8);
  EXPECT_EQ(padded(9, 8), 16);
  EXPECT_EQ(padded(5, 1), 5);
}

// Next-fit in arrival order into bins of cp x device_tokens, whatever their work; single samples
// split off the last bins until the bins deal evenly; micro-batch m, rank j: bin m x dp + j.
TEST(MegatronSchedulers, DpBalancedPacksInOrderNextFitAndDealsRoundRobin) {
  // Bins of 2 x 10 tokens: {0, 1} (20), {2} (15), {3, 4} (12).
  const std::vector<TokenCount> lengths = {12, 8, 15, 6, 6};
  const auto one_rank = dp_balanced_micro_batches(lengths, 2, 1, 10);
  ASSERT_EQ(one_rank.size(), 3u);
  EXPECT_EQ(one_rank[0], (Bins{{0, 1}}));
  EXPECT_EQ(one_rank[1], (Bins{{2}}));
  EXPECT_EQ(one_rank[2], (Bins{{3, 4}}));
  // Two ranks: three bins become four, the last sample of the last bin of two its own bin.
  const auto two_ranks = dp_balanced_micro_batches(lengths, 2, 2, 10);
  ASSERT_EQ(two_ranks.size(), 2u);
  EXPECT_EQ(two_ranks[0], (Bins{{0, 1}, {2}}));
  EXPECT_EQ(two_ranks[1], (Bins{{3}, {4}}));
  // Every sample once.
  std::multiset<std::size_t> seen;
  for (const auto& micro_batch : two_ranks) {
    for (const auto& bin : micro_batch) seen.insert(bin.begin(), bin.end());
  }
  EXPECT_EQ(seen, (std::multiset<std::size_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(dp_balanced_micro_batches({5}, 2, 2, 10), InvalidInput);
  EXPECT_THROW(dp_balanced_micro_batches(lengths, 0, 1, 10), InvalidInput);
}

// Every sample once per iteration, in groups of power-of-two sizes dividing the pool, each
// holding at most its size x device_tokens tokens, no round using more devices than the pool.
TEST(MegatronSchedulers, DynamicRoundsPlaceEverySampleOnceInGroupsThatHoldIt) {
  const std::vector<TokenCount> lengths = {8000, 5000, 3000, 2048, 1500, 900,  700,
                                           300,  200,  128,  128,  128,  4096, 64};
  const std::int32_t devices = 16;
  const TokenCount bound = 2048;
  const auto rounds = packing_aware_rounds(lengths, devices, bound);
  ASSERT_FALSE(rounds.empty());
  std::multiset<std::size_t> seen;
  for (const auto& round : rounds) {
    std::int32_t used = 0;
    for (const DynamicGroup& group : round) {
      used += group.devices;
      EXPECT_EQ(devices % group.devices, 0);
      EXPECT_EQ(group.devices & (group.devices - 1), 0) << group.devices;
      TokenCount tokens = 0;
      for (const std::size_t i : group.samples) tokens += lengths[i];
      EXPECT_LE(tokens, static_cast<TokenCount>(group.devices) * bound);
      seen.insert(group.samples.begin(), group.samples.end());
    }
    EXPECT_LE(used, devices);
  }
  EXPECT_EQ(seen.size(), lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  // The longest sample opens the first round, in the smallest group that holds it (4 x 2048).
  const DynamicGroup& first = rounds.front().front();
  EXPECT_EQ(first.samples.front(), 0u);
  EXPECT_GE(first.devices, 4);
  EXPECT_THROW(packing_aware_rounds({40000}, devices, bound), InvalidInput);
  EXPECT_THROW(packing_aware_rounds(lengths, 0, bound), InvalidInput);
}

}  // namespace
}  // namespace dcp::suites
