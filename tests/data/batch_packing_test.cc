// SPDX-License-Identifier: Apache-2.0
// Tests of the reference batch packing and of batches sampled from length distributions.
#include "dcp/data/batch_packing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

namespace dcp {
namespace {

using Batches = std::vector<std::vector<TokenCount>>;

TokenCount sum(const std::vector<TokenCount>& batch) {
  TokenCount total = 0;
  for (const TokenCount v : batch) total += v;
  return total;
}

// The message of the InvalidInput that `f` throws, or "" if it throws none.
template <typename F>
std::string invalid_input_message(F&& f) {
  try {
    f();
  } catch (const InvalidInput& error) {
    return error.what();
  }
  return "";
}

TEST(BatchPacking, ScaleLengthRoundsHalfToEvenAndNeverBelowOne) {
  EXPECT_EQ(scale_length(1000, 1.0), 1000);
  EXPECT_EQ(scale_length(1000, 2.0), 2000);
  EXPECT_EQ(scale_length(1001, 0.5), 500);  // 500.5 -> 500, as Python's round() gives
  EXPECT_EQ(scale_length(1003, 0.5), 502);  // 501.5 -> 502
  EXPECT_EQ(scale_length(10, 0.33), 3);     // 3.3 -> 3
  EXPECT_EQ(scale_length(10, 0.37), 4);     // 3.7 -> 4
  EXPECT_EQ(scale_length(1, 0.5), 1);       // 0.5 -> 0, raised to 1
  EXPECT_EQ(scale_length(1, 0.1), 1);
  EXPECT_THROW(scale_length(0, 1.0), InvalidInput);
  EXPECT_THROW(scale_length(5, 0.0), InvalidInput);
  EXPECT_THROW(scale_length(5, std::numeric_limits<double>::infinity()), InvalidInput);
  EXPECT_THROW(scale_length(std::numeric_limits<TokenCount>::max(), 4.0), InvalidInput);
}

TEST(BatchPacking, ValidateAcceptsTheDefaults) {
  EXPECT_NO_THROW(validate(PackingOptions{}));
  EXPECT_EQ(effective_max_length(PackingOptions{}), 131072);
  EXPECT_EQ(min_batch_tokens(PackingOptions{}), 98304);  // 0.75 * 131072
}

TEST(BatchPacking, ValidateNamesTheBadFieldAndItsValue) {
  const auto message_for = [](PackingOptions options) {
    return invalid_input_message([&] { validate(options); });
  };
  const std::vector<std::pair<PackingOptions, std::vector<std::string>>> cases = {
      {{.tokens_per_batch = 0}, {"tokens_per_batch", "0"}},
      {{.min_fill = 0.0}, {"min_fill", "0"}},
      {{.min_fill = 1.5}, {"min_fill", "1.5"}},
      {{.min_fill = std::nan("")}, {"min_fill", "nan"}},
      {{.max_length = -3}, {"max_length", "-3"}},
      {{.tokens_per_batch = 1000, .max_length = 1001}, {"max_length", "1001"}},
      {{.scale = -2.0}, {"scale", "-2"}},
      {{.scale = std::numeric_limits<double>::infinity()}, {"scale", "inf"}},
  };
  for (const auto& [options, needles] : cases) {
    const std::string message = message_for(options);
    ASSERT_FALSE(message.empty()) << "no InvalidInput for " << needles[0];
    for (const std::string& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos) << message;
    }
  }
}

TEST(BatchPacking, RejectsANonPositiveLengthNamingItsIndex) {
  const std::vector<TokenCount> lengths = {5, 7, -4, 3};
  const std::string message = invalid_input_message([&] { pack_batches(lengths, {}, 1); });
  EXPECT_NE(message.find("lengths[2]"), std::string::npos) << message;
  EXPECT_NE(message.find("-4"), std::string::npos) << message;
}

TEST(BatchPacking, EqualLengthsFillWholeBatchesAndDropTheShortRemainder) {
  // 25 sequences of 100 tokens, 1000 per batch: two full batches, and a remainder of 500 tokens
  // under the 750-token minimum. Every shuffle gives the same result.
  const std::vector<TokenCount> lengths(25, 100);
  const PackingOptions options{.tokens_per_batch = 1000};
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    EXPECT_EQ(pack_batches(lengths, options, seed), Batches(2, std::vector<TokenCount>(10, 100)));
  }
}

TEST(BatchPacking, KeepsTheFinalBatchWhenItMeetsMinFill) {
  // 28 sequences of 100: the remainder of 800 tokens meets the 750-token minimum.
  const std::vector<TokenCount> lengths(28, 100);
  const Batches batches = pack_batches(lengths, {.tokens_per_batch = 1000}, 3);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(sum(batches[2]), 800);
}

TEST(BatchPacking, KeepsOnlyBatchesAtLeastMinFillFull) {
  // Sequences of 600 never share a 1000-token batch: each batch holds exactly 600 tokens.
  const std::vector<TokenCount> lengths(4, 600);
  EXPECT_EQ(pack_batches(lengths, {.tokens_per_batch = 1000, .min_fill = 0.6}, 1).size(), 4u);
  EXPECT_TRUE(pack_batches(lengths, {.tokens_per_batch = 1000, .min_fill = 0.61}, 1).empty());
}

TEST(BatchPacking, ScalesBeforePackingAndDropsSequencesOverMaxLength) {
  // Scaled by 2: 60 -> 120 fits max_length 200, 150 -> 300 does not.
  std::vector<TokenCount> lengths(20, 60);
  lengths.insert(lengths.end(), 7, 150);
  const Batches batches = pack_batches(
      lengths, {.tokens_per_batch = 480, .min_fill = 1.0, .max_length = 200, .scale = 2}, 9);
  EXPECT_EQ(batches, Batches(5, std::vector<TokenCount>(4, 120)));
}

TEST(BatchPacking, EmptyInputGivesNoBatches) { EXPECT_TRUE(pack_batches({}, {}, 1).empty()); }

// The reference algorithm restated independently: Fisher-Yates with Rng(seed), drop, greedy fill.
Batches reference_packing(std::vector<TokenCount> stream, const PackingOptions& options,
                          std::uint64_t seed) {
  for (TokenCount& v : stream) v = scale_length(v, options.scale);
  Rng rng(seed);
  for (std::size_t i = stream.size(); i-- > 1;) {
    std::swap(stream[i],
              stream[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i)))]);
  }
  const TokenCount max_length =
      options.max_length == 0 ? options.tokens_per_batch : options.max_length;
  const double min_tokens = options.min_fill * static_cast<double>(options.tokens_per_batch);
  Batches out;
  std::vector<TokenCount> batch;
  for (const TokenCount v : stream) {
    if (v > max_length) continue;
    if (sum(batch) + v > options.tokens_per_batch) {
      if (static_cast<double>(sum(batch)) >= min_tokens) out.push_back(batch);
      batch.clear();
    }
    batch.push_back(v);
  }
  if (static_cast<double>(sum(batch)) >= min_tokens) out.push_back(batch);
  return out;
}

TEST(BatchPacking, RandomInputsSatisfyThePackingInvariantsAndMatchTheReference) {
  Rng rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TokenCount> lengths(static_cast<std::size_t>(rng.uniform_int(0, 300)));
    for (TokenCount& v : lengths) v = rng.uniform_int(1, 3000);
    PackingOptions options;
    options.tokens_per_batch = rng.uniform_int(500, 8000);
    options.min_fill = 0.3 + 0.7 * rng.uniform01();
    options.max_length = rng.uniform_int(0, options.tokens_per_batch);
    options.scale =
        std::vector<double>{0.5, 1, 2, 4}[static_cast<std::size_t>(rng.uniform_int(0, 3))];
    const std::uint64_t seed = rng.next_u64();
    const Batches batches = pack_batches(lengths, options, seed);
    EXPECT_EQ(batches, reference_packing(lengths, options, seed)) << "trial " << trial;

    std::map<TokenCount, int> available;  // multiset of scaled inputs
    for (const TokenCount v : lengths) ++available[scale_length(v, options.scale)];
    for (const auto& batch : batches) {
      ASSERT_FALSE(batch.empty());
      EXPECT_LE(sum(batch), options.tokens_per_batch);
      EXPECT_GE(sum(batch), min_batch_tokens(options));
      for (const TokenCount v : batch) {
        EXPECT_LE(v, effective_max_length(options));
        EXPECT_GE(--available[v], 0) << "length " << v << " used more often than given";
      }
    }
  }
}

TEST(BatchPacking, SameSeedSameBatchesAndDifferentSeedDifferentBatches) {
  const std::vector<TokenCount> lengths = sample_lengths(LengthDistributionKind::kWlb, 5000, 1);
  const PackingOptions options{.tokens_per_batch = 65536};
  EXPECT_EQ(pack_batches(lengths, options, 4), pack_batches(lengths, options, 4));
  EXPECT_NE(pack_batches(lengths, options, 4), pack_batches(lengths, options, 5));
}

TEST(SampleBatches, ReturnsExactlyCountValidBatchesForEveryDistributionAndScale) {
  for (const LengthDistributionKind kind : all_length_distributions()) {
    for (const double scale : {0.5, 1.0, 2.0, 4.0}) {
      const PackingOptions options{.scale = scale};
      const Batches batches = sample_batches(kind, 12, options, 77);
      ASSERT_EQ(batches.size(), 12u) << to_string(kind) << " x" << scale;
      for (const auto& batch : batches) {
        EXPECT_LE(sum(batch), options.tokens_per_batch);
        EXPECT_GE(sum(batch), min_batch_tokens(options));
        for (const TokenCount v : batch) EXPECT_LE(v, effective_max_length(options));
      }
    }
  }
}

TEST(SampleBatches, IsDeterministicInTheSeed) {
  const PackingOptions options{.tokens_per_batch = 32768};
  const auto kind = LengthDistributionKind::kMagiHistogram;
  EXPECT_EQ(sample_batches(kind, 30, options, 1), sample_batches(kind, 30, options, 1));
  EXPECT_NE(sample_batches(kind, 30, options, 1), sample_batches(kind, 30, options, 2));
}

TEST(SampleBatches, ScaledLengthsStayInTheScaledSupport) {
  // LongAlign lies in [8192, 65536]; at scale 0.5 every length is in [4096, 32768].
  const Batches batches = sample_batches(LengthDistributionKind::kLongAlign, 20, {.scale = 0.5}, 3);
  for (const auto& batch : batches) {
    for (const TokenCount v : batch) {
      EXPECT_GE(v, 4096);
      EXPECT_LE(v, 32768);
    }
  }
}

TEST(SampleBatches, ZeroCountGivesNoBatches) {
  EXPECT_TRUE(sample_batches(LengthDistributionKind::kProLong, 0, {}, 1).empty());
}

TEST(SampleBatches, ThrowsInsteadOfLoopingWhenNoBatchCanBeFilled) {
  // Scaled LongAlign lengths are at least 32768, all over max_length 1000.
  const PackingOptions options{.tokens_per_batch = 1000, .max_length = 1000, .scale = 4};
  const std::string message = invalid_input_message(
      [&] { sample_batches(LengthDistributionKind::kLongAlign, 5, options, 1); });
  ASSERT_FALSE(message.empty());
  for (const std::string needle :
       {"longalign", "scale 4", "tokens_per_batch 1000", "max_length 1000"}) {
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
  EXPECT_THROW(sample_batches(LengthDistributionKind::kLongAlign, 5, {.tokens_per_batch = 0}, 1),
               InvalidInput);
}

TEST(DealByWork, DealsLargestWorkFirstToTheLeastLoadedGroupWithRoom) {
  const std::vector<TokenCount> lengths = {10, 10, 10, 10};
  const std::vector<double> works = {4, 3, 2, 1};
  // 0 and 1 apart, 2 to the lighter (1: 3 < 4), 3 to group 0 (4 < 5).
  EXPECT_EQ(deal_by_work(works, lengths, 2, 100),
            (std::vector<std::vector<std::size_t>>{{0, 3}, {1, 2}}));
  // Room for two samples per group: the third sample of the heavier group goes elsewhere.
  EXPECT_EQ(deal_by_work(works, lengths, 2, 20),
            (std::vector<std::vector<std::size_t>>{{0, 3}, {1, 2}}));
  // No room for the 30-token sample: left out.
  const std::vector<TokenCount> one_long = {10, 10, 10, 30};
  EXPECT_EQ(deal_by_work(works, one_long, 2, 20),
            (std::vector<std::vector<std::size_t>>{{0}, {1, 2}}));
  EXPECT_THROW(deal_by_work(works, lengths, 0, 20), InvalidInput);
  const std::vector<double> one_work = {1.0};
  EXPECT_THROW(deal_by_work(one_work, lengths, 2, 20), InvalidInput);
}

}  // namespace

}  // namespace dcp
