// SPDX-License-Identifier: Apache-2.0
// Every softmax loop implementation this CPU runs agrees with std::exp and plain loops.
#include "dcp/kernels/cpu/vector_math.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/rng.h"

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels {
namespace {

TEST(VectorMath, TheSelectedImplementationIsSupported) {
  const auto all = supported_vector_math();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front()->isa, "portable");
  bool found = false;
  for (const VectorMath* vm : all) found |= vm == &vector_math();
  EXPECT_TRUE(found);
}

TEST(VectorMath, ExpShiftSumMatchesStdExpAndZeroesMaskedKeys) {
  Rng rng(7);
  for (const VectorMath* vm : supported_vector_math()) {
    for (std::size_t n : {0u, 1u, 5u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 100u}) {
      std::vector<float> x(n), original(n);
      for (std::size_t i = 0; i < n; ++i) {
        const double u = rng.uniform01();
        // Mostly [-90, 2], with masked keys and an exact zero shift mixed in.
        x[i] = u < 0.1 ? kNegInf : static_cast<float>(-90.0 + 92.0 * rng.uniform01());
      }
      original = x;
      const float shift = 1.5f;
      const float sum = vm->exp_shift_sum(x.data(), n, shift);
      double expected_sum = 0;
      for (std::size_t i = 0; i < n; ++i) {
        // The argument is rounded to fp32 before the exp (as in the kernels): compare the exp
        // itself, not the subtraction's rounding.
        const float argument = original[i] - shift;
        const double want = std::exp(double{argument});
        if (original[i] == kNegInf || argument < -87.0f) {
          EXPECT_EQ(x[i], 0.0f) << vm->isa << " " << original[i];
        } else {
          EXPECT_NEAR(x[i], want, 4e-7 * want) << vm->isa << " " << original[i];
          expected_sum += want;
        }
      }
      EXPECT_NEAR(sum, expected_sum, 1e-6 * expected_sum + 1e-30) << vm->isa << " n=" << n;
    }
  }
}

TEST(VectorMath, MaxAndSoftmaxGradMatchPlainLoops) {
  Rng rng(8);
  for (const VectorMath* vm : supported_vector_math()) {
    EXPECT_EQ(vm->max(nullptr, 0), kNegInf) << vm->isa;
    for (std::size_t n : {1u, 7u, 16u, 23u, 40u, 64u, 129u}) {
      std::vector<float> x(n, kNegInf), p(n), ds(n);
      EXPECT_EQ(vm->max(x.data(), n), kNegInf) << vm->isa;
      float want = kNegInf;
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(rng.normal());
        want = std::max(want, x[i]);
        p[i] = static_cast<float>(rng.uniform01());
        ds[i] = static_cast<float>(rng.normal());
      }
      EXPECT_EQ(vm->max(x.data(), n), want) << vm->isa << " n=" << n;
      std::vector<float> expected(n);
      for (std::size_t i = 0; i < n; ++i) expected[i] = p[i] * (ds[i] - 0.25f);
      vm->softmax_grad(ds.data(), p.data(), n, 0.25f);
      for (std::size_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(ds[i], expected[i]) << vm->isa;
    }
  }
}

}  // namespace
}  // namespace dcp::kernels
