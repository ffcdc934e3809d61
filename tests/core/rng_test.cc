// SPDX-License-Identifier: Apache-2.0
// The generator is reproducible and its outputs have the documented ranges.
#include "dcp/core/rng.h"

#include <gtest/gtest.h>

namespace dcp {
namespace {

TEST(Rng, SameSeedGivesTheSameStream) {
  Rng a(5), b(5), c(6);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differs |= x != c.next_u64();
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, StreamIsPinnedAcrossPlatforms) {
  // xoshiro256** seeded by splitmix64(0): a change here changes every sampled batch and plan.
  Rng rng(0);
  const std::uint64_t first = rng.next_u64();
  Rng again(0);
  EXPECT_EQ(again.next_u64(), first);
  EXPECT_EQ(first, 0x99EC5F36CB75F2B4ULL);
}

TEST(Rng, UniformIntStaysInItsInclusiveRangeAndHitsBothEnds) {
  Rng rng(1);
  bool lo = false, hi = false;
  for (int i = 0; i < 10000; ++i) {
    const auto x = rng.uniform_int(-3, 3);
    ASSERT_GE(x, -3);
    ASSERT_LE(x, 3);
    lo |= x == -3;
    hi |= x == 3;
  }
  EXPECT_TRUE(lo && hi);
}

TEST(Rng, NormalHasMeanZeroAndUnitVariance) {
  Rng rng(2);
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal();
    sum += x;
    sum2 += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sum2 / n, 1.0, 0.02);
}

}  // namespace
}  // namespace dcp
