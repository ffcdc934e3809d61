// SPDX-License-Identifier: Apache-2.0
// Tests of the sequence-length models: names, determinism, supports and shape statistics.
#include "dcp/data/length_distribution.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

namespace dcp {
namespace {

// Enough draws that the statistical bounds below hold with a wide margin (their standard errors
// are well under 1%), yet fast.
constexpr std::size_t kDraws = 100000;

double median(std::vector<TokenCount> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? static_cast<double>(values[mid])
                                : 0.5 * static_cast<double>(values[mid - 1] + values[mid]);
}

double mean(const std::vector<TokenCount>& values) {
  double sum = 0;
  for (const TokenCount v : values) sum += static_cast<double>(v);
  return sum / static_cast<double>(values.size());
}

double fraction_at_most(const std::vector<TokenCount>& values, TokenCount bound) {
  const auto n =
      std::count_if(values.begin(), values.end(), [&](TokenCount v) { return v <= bound; });
  return static_cast<double>(n) / static_cast<double>(values.size());
}

TEST(LengthDistribution, NamesRoundTripThroughParse) {
  const std::vector<std::string> expected = {"ldc",  "longalign", "prolong",
                                             "magi", "wlb",       "megatron"};
  ASSERT_EQ(all_length_distributions().size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const LengthDistributionKind kind = all_length_distributions()[i];
    EXPECT_EQ(to_string(kind), expected[i]);
    EXPECT_EQ(parse_length_distribution(expected[i]), kind);
  }
}

TEST(LengthDistribution, ParseRejectsAnUnknownNameAndListsTheKnownOnes) {
  try {
    parse_length_distribution("LDC");
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(std::string(error.what()),
              "unknown length distribution 'LDC' (known: ldc, longalign, prolong, magi, wlb, "
              "megatron)");
  }
  EXPECT_THROW(parse_length_distribution(""), InvalidInput);
}

TEST(LengthDistribution, EveryKindHasAOneLineDescription) {
  std::set<std::string> seen;
  for (const LengthDistributionKind kind : all_length_distributions()) {
    const std::string text(describe(kind));
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    EXPECT_TRUE(seen.insert(text).second) << "duplicate description " << text;
  }
}

TEST(LengthDistribution, SameSeedGivesTheSameLengths) {
  for (const LengthDistributionKind kind : all_length_distributions()) {
    EXPECT_EQ(sample_lengths(kind, 1000, 7), sample_lengths(kind, 1000, 7)) << to_string(kind);
  }
}

TEST(LengthDistribution, DifferentSeedsGiveDifferentLengths) {
  for (const LengthDistributionKind kind : all_length_distributions()) {
    EXPECT_NE(sample_lengths(kind, 1000, 7), sample_lengths(kind, 1000, 8)) << to_string(kind);
  }
}

TEST(LengthDistribution, SampleLengthsEqualsRepeatedSampleLengthOnOneGenerator) {
  for (const LengthDistributionKind kind : all_length_distributions()) {
    Rng rng(99);
    std::vector<TokenCount> one_by_one;
    for (int i = 0; i < 500; ++i) one_by_one.push_back(sample_length(kind, rng));
    EXPECT_EQ(sample_lengths(kind, 500, 99), one_by_one) << to_string(kind);
  }
}

TEST(LengthDistribution, EveryLengthLiesInTheDocumentedSupport) {
  // The bounds are restated from the header rather than read from support(), so that a change
  // of either the sampler or the table is caught.
  struct Expected {
    LengthDistributionKind kind;
    TokenCount min;
    TokenCount max;
  };
  const std::vector<Expected> cases = {
      {LengthDistributionKind::kLongDataCollections, 16, 131072},
      {LengthDistributionKind::kLongAlign, 8192, 65536},
      {LengthDistributionKind::kProLong, 575, 340149},
      {LengthDistributionKind::kMagiHistogram, 1, 196608},
      {LengthDistributionKind::kWlb, 1, 131072},
      {LengthDistributionKind::kMegatronLogNormal, 128, 8192},
  };
  for (const Expected& c : cases) {
    EXPECT_EQ(support(c.kind).min, c.min) << to_string(c.kind);
    EXPECT_EQ(support(c.kind).max, c.max) << to_string(c.kind);
    const std::vector<TokenCount> lengths = sample_lengths(c.kind, kDraws, 3);
    const auto [lo, hi] = std::minmax_element(lengths.begin(), lengths.end());
    EXPECT_GE(*lo, c.min) << to_string(c.kind);
    EXPECT_LE(*hi, c.max) << to_string(c.kind);
  }
}

TEST(LengthDistribution, MagiMatchesTheHistogramMedianAndShortFraction) {
  const std::vector<TokenCount> lengths =
      sample_lengths(LengthDistributionKind::kMagiHistogram, kDraws, 11);
  const double m = median(lengths);
  EXPECT_GE(m, 350);
  EXPECT_LE(m, 700);
  // Buckets [1, 200] and [201, 1024] hold 18.6% + 52.8% of documents.
  EXPECT_NEAR(fraction_at_most(lengths, 1024), 0.714, 0.03);
  EXPECT_NEAR(fraction_at_most(lengths, 200), 0.186, 0.02);
  // The two tail buckets hold 1.3%: the long tail is present but rare.
  EXPECT_NEAR(1.0 - fraction_at_most(lengths, 16384), 0.013, 0.004);
}

TEST(LengthDistribution, ProLongMedianAndMeanMatchTheTruncatedLogNormal) {
  // log-normal(7.68, 0.74) cut below at 575 (3.7% of its mass): median exp(7.68 + 0.74 *
  // Phi^-1(0.5183)) = 2239, mean 2938, computed analytically. The cut raises both above the
  // untruncated median exp(7.68) = 2164.
  const std::vector<TokenCount> lengths =
      sample_lengths(LengthDistributionKind::kProLong, kDraws, 5);
  EXPECT_NEAR(median(lengths), 2239, 0.05 * 2239);
  EXPECT_NEAR(mean(lengths), 2938, 0.05 * 2938);
}

TEST(LengthDistribution, WlbMedianMatchesTheLogNormal) {
  // The truncation removes under 0.01% of the mass, so the median stays exp(7.8) = 2440.
  const std::vector<TokenCount> lengths = sample_lengths(LengthDistributionKind::kWlb, kDraws, 5);
  EXPECT_NEAR(median(lengths), 2440, 0.1 * 2440);
  EXPECT_NEAR(mean(lengths), 4266, 0.1 * 4266);
}

TEST(LengthDistribution, MegatronIsTheLogNormalOfMeanAThousandCutTo128Through8192) {
  // mu = ln 1024 - 1.125 = 5.806: median exp(mu) = 332 before the cut; the cut keeps
  // Phi((ln 8192 - mu) / 1.5) - Phi((ln 128 - mu) / 1.5) = 0.984 - 0.262 = 0.722 of the mass, its
  // median at Phi^-1(0.262 + 0.722 / 2) = Phi^-1(0.623): exp(mu + 1.5 x 0.313) = 531, and its
  // mean 1023 (computed analytically).
  const std::vector<TokenCount> lengths =
      sample_lengths(LengthDistributionKind::kMegatronLogNormal, kDraws, 5);
  EXPECT_NEAR(median(lengths), 531, 0.05 * 531);
  EXPECT_NEAR(mean(lengths), 1023, 0.05 * 1023);
}

TEST(LengthDistribution, LongAlignIsLogUniformBetween8KAnd64K) {
  const std::vector<TokenCount> lengths =
      sample_lengths(LengthDistributionKind::kLongAlign, kDraws, 13);
  // Log-uniform: the median is the geometric mean of the bounds, sqrt(8192 * 65536) = 23170,
  // and each of the three octaves holds a third of the mass.
  EXPECT_NEAR(median(lengths), 23170, 0.1 * 23170);
  EXPECT_NEAR(fraction_at_most(lengths, 16384), 1.0 / 3.0, 0.02);
  EXPECT_NEAR(fraction_at_most(lengths, 32768), 2.0 / 3.0, 0.02);
}

TEST(LengthDistribution, LdcIsSkewedWithATokenWeightedMeanAQuarterOfLongAligns) {
  const std::vector<TokenCount> lengths =
      sample_lengths(LengthDistributionKind::kLongDataCollections, kDraws, 17);
  // log-normal(ln 480, 1.4) cut to [16, 131072]: median 487, 0.58% over 16K (numerical
  // integration of the truncated density).
  EXPECT_NEAR(median(lengths), 487, 0.1 * 487);
  EXPECT_NEAR(1.0 - fraction_at_most(lengths, 16384), 0.0058, 0.002);
  // The length the average token sits in: E[L^2] / E[L], ~8.1K here against (8192 + 65536) / 2 =
  // 36.9K for LongAlign's log-uniform lengths.
  const auto token_weighted_mean = [](const std::vector<TokenCount>& v) {
    double sum = 0;
    double squares = 0;
    for (const TokenCount x : v) {
      sum += static_cast<double>(x);
      squares += static_cast<double>(x) * static_cast<double>(x);
    }
    return squares / sum;
  };
  const double ldc = token_weighted_mean(lengths);
  EXPECT_NEAR(ldc, 8100, 0.15 * 8100);
  const double longalign =
      token_weighted_mean(sample_lengths(LengthDistributionKind::kLongAlign, kDraws, 17));
  EXPECT_NEAR(longalign, 36864, 0.05 * 36864);
  EXPECT_LT(ldc, 0.3 * longalign);
  // Skewed: the mean is well above the median.
  EXPECT_GT(mean(lengths), 2.0 * median(lengths));
}

}  // namespace
}  // namespace dcp
