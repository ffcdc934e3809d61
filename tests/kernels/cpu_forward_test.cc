// SPDX-License-Identifier: Apache-2.0
// The CPU forward matches the fp64 reference on full, causal and random interval masks, GQA,
// odd sizes, accumulation and merges, and stays NaN-free.
#include <cmath>
#include <tuple>

#include <gtest/gtest.h>

#include "dcp/kernels/cpu/cpu_attention.h"
#include "dcp/kernels/reference/reference_attention.h"

#include "tests/kernels/attention_case.h"

namespace dcp::kernels {
namespace {

using testing::AttentionCase;
using testing::kFp32Tolerance;
using testing::Outputs;

void expect_forward_matches_reference(const AttentionCase& c, int threads) {
  ReferenceKernels ref;
  CpuKernels cpu(threads);
  auto expected = c.make_outputs();
  c.forward(ref, expected);
  auto actual = c.make_outputs(123.0f);  // overwrite must not read the old contents
  c.forward(cpu, actual);
  testing::expect_all_close(actual, expected, kFp32Tolerance, true, false);
}

TEST(CpuKernels, ForwardMatchesReferenceOnFullTileWithSizesNotMultiplesOfTheChunk) {
  AttentionCase c(attention_params(1, 1, 64), 21);
  c.add_tile(c.add_row(200), 300, testing::full_mask());
  expect_forward_matches_reference(c, 2);
}

TEST(CpuKernels, ForwardMatchesReferenceOnCausalTile) {
  AttentionCase c(attention_params(8, 2, 96), 22);
  c.add_tile(c.add_row(300), 300, testing::causal_mask(300, 300, 0));
  expect_forward_matches_reference(c, 2);
}

TEST(CpuKernels, ForwardMatchesReferenceOnRandomMasksForEveryHeadShape) {
  // Several rows of several tiles, intervals cutting sub-tiles anywhere, empty rows, and head
  // dims that are not powers of two.
  std::uint64_t seed = 30;
  for (auto [qh, kvh] : {std::pair{8, 2}, std::pair{4, 4}, std::pair{2, 1}}) {
    for (std::int32_t d : {1, 3, 64, 96, 128}) {
      SCOPED_TRACE(to_size(qh * 1000 + kvh * 100 + d));
      AttentionCase c(attention_params(qh, kvh, d), ++seed);
      testing::add_mixed_rows(c);
      expect_forward_matches_reference(c, 3);
    }
  }
}

TEST(CpuKernels, ForwardHandlesOneTokenTilesAndEmptyRows) {
  AttentionCase c(attention_params(2, 1, 5), 40);
  c.add_tile(c.add_row(1), 1, testing::full_mask());
  const std::size_t b = c.add_row(1);
  c.add_tile(b, 1, testing::full_mask());
  c.add_tile(b, 7, testing::causal_mask(1, 7, 2));
  c.add_tile(c.add_row(5), 1, testing::random_mask(c.rng(), 5, 1, 1, 0.4));
  c.add_row(3);  // no tiles at all
  c.add_row(0);  // no queries
  expect_forward_matches_reference(c, 2);
}

TEST(CpuKernels, FullyMaskedRowsGiveZeroOutputAndNegativeInfinityLse) {
  AttentionCase c(attention_params(2, 2, 16), 41);
  const std::size_t row = c.add_row(6);
  // Rows 1 and 4 attend nothing in either tile; an empty tile (no rows attend) on top.
  c.add_tile(row, 10, testing::MaskData{false, {0, 1, 1, 2, 3, 3, 4}, {0, 4, 2, 3, 5, 10, 9, 10}});
  c.add_tile(row, 4, testing::MaskData{false, {0, 0, 0, 0, 0, 0, 0}, {}});
  c.add_row(4);  // a row without tiles
  CpuKernels cpu(2);
  auto out = c.make_outputs(5.0f);
  c.forward(cpu, out);
  for (std::int32_t j = 0; j < 2; ++j) {
    for (std::int32_t r : {1, 4}) {
      EXPECT_EQ(out.lse[0][to_size(j * 6 + r)], kNegInf);
      for (std::int32_t x = 0; x < 16; ++x)
        EXPECT_EQ(out.o[0][to_size((r * 2 + j) * 16 + x)], 0.0f);
    }
  }
  for (float x : out.lse[1]) EXPECT_EQ(x, kNegInf);
  for (float x : out.o[1]) EXPECT_EQ(x, 0.0f);
  for (float x : out.o[0]) EXPECT_FALSE(std::isnan(x));
  expect_forward_matches_reference(c, 2);
}

TEST(CpuKernels, AccumulatingTileByTileEqualsOneCallOverBothTiles) {
  AttentionCase c(attention_params(4, 2, 32), 42);
  const std::size_t row = c.add_row(150);
  c.add_tile(row, 200, testing::causal_mask(150, 200, 40));
  c.add_tile(row, 90, testing::random_mask(c.rng(), 150, 90, 2, 0.3));
  CpuKernels cpu(2);
  ReferenceKernels ref;
  auto expected = c.make_outputs();
  c.forward(ref, expected);
  auto one_call = c.make_outputs();
  c.forward(cpu, one_call);
  auto split = c.make_outputs();
  c.forward(cpu, split, false, 0, 1);
  c.forward(cpu, split, true, 1, 2);
  testing::expect_all_close(split, expected, kFp32Tolerance, true, false);
  testing::expect_all_close(split, one_call, kFp32Tolerance, true, false);
  // The same through merge(): two separately computed partials.
  auto first = c.make_outputs(), second = c.make_outputs();
  c.forward(cpu, first, false, 0, 1);
  c.forward(cpu, second, false, 1, 2);
  cpu.merge(first.o[0].data(), first.lse[0].data(), second.o[0].data(), second.lse[0].data(), 150,
            4, 32);
  testing::expect_all_close(first, expected, kFp32Tolerance, true, false);
}

TEST(CpuKernels, AccumulatingARowWithNoKeysLeavesThePartialUnchanged) {
  AttentionCase c(attention_params(1, 1, 8), 43);
  const std::size_t row = c.add_row(4);
  c.add_tile(row, 5, testing::full_mask());
  c.add_tile(row, 5, testing::MaskData{false, {0, 0, 0, 0, 0}, {}});
  CpuKernels cpu(1);
  auto out = c.make_outputs();
  c.forward(cpu, out, false, 0, 1);
  const auto before = out;
  c.forward(cpu, out, true, 1, 2);  // the second tile is empty
  EXPECT_EQ(out.o, before.o);
  EXPECT_EQ(out.lse, before.lse);
}

TEST(CpuKernels, ForwardThreadCountsAgreeWithinFp32Rounding) {
  AttentionCase c(attention_params(8, 2, 64), 44);
  const std::size_t row = c.add_row(260);
  c.add_tile(row, 300, testing::random_mask(c.rng(), 260, 300, 3, 0.1));
  c.add_tile(c.add_row(100), 400, testing::full_mask());
  std::vector<Outputs> results;
  for (int threads : {1, 2, 3}) {
    CpuKernels cpu(threads);
    results.push_back(c.make_outputs());
    c.forward(cpu, results.back());
  }
  // Each output element is computed by one task in a fixed order, so even bits agree.
  EXPECT_EQ(results[0].o, results[1].o);
  EXPECT_EQ(results[0].o, results[2].o);
  EXPECT_EQ(results[0].lse, results[2].lse);
}

TEST(CpuKernels, ForwardStaysNanFreeAndAccurateWithLargeScores) {
  // Scores in the thousands: exp without the running max would overflow.
  AttentionParams p = attention_params(2, 1, 16);
  p.softmax_scale = 8.0f;
  AttentionCase c(p, 45, 4.0);
  const std::size_t row = c.add_row(70);
  c.add_tile(row, 150, testing::random_mask(c.rng(), 70, 150, 3, 0.2));
  c.add_tile(row, 40, testing::full_mask());
  CpuKernels cpu(2);
  auto out = c.make_outputs();
  c.forward(cpu, out);
  for (float x : out.o[0]) ASSERT_TRUE(std::isfinite(x));
  for (float x : out.lse[0]) ASSERT_FALSE(std::isnan(x));
  expect_forward_matches_reference(c, 2);
}

// Oracle for low-precision storage: the exact (fp64) attention of the unrounded inputs is the
// truth. Rounding the inputs to bf16 alone already moves the fp64 result by some amount (the
// baseline, unavoidable for any kernel that reads bf16); the cpu kernel reading bf16 must stay
// within twice that baseline of the truth, i.e. its own fp32 arithmetic adds at most as much
// error as the storage rounding does.
void expect_low_precision_within_twice_the_rounding_baseline(ElementType storage) {
  AttentionCase rounded(attention_params(4, 2, 64, storage), 46);
  AttentionCase exact(attention_params(4, 2, 64, ElementType::kFp32), 46);
  for (AttentionCase* c : {&rounded, &exact}) {
    const std::size_t row = c->add_row(150);
    c->add_tile(row, 180, testing::causal_mask(150, 180, 30));
    c->add_tile(row, 70, testing::full_mask());
  }
  // Same random stream: the fp32 case holds the values before rounding. Make that explicit by
  // rounding the fp32 values and checking they are what the storage case holds.
  for (std::size_t t = 0; t < 2; ++t) {
    const auto& ev = exact.rows()[0].tiles[t].k.values;
    const auto& rv = rounded.rows()[0].tiles[t].k.values;
    ASSERT_EQ(ev.size(), rv.size());
    std::vector<unsigned char> bytes(ev.size() * 2);
    std::vector<float> back(ev.size());
    from_float(storage, ev.data(), bytes.data(), ev.size());
    to_float(storage, bytes.data(), back.data(), ev.size());
    ASSERT_EQ(back, rv);
  }
  ReferenceKernels ref;
  CpuKernels cpu(2);
  auto truth = exact.make_outputs(), baseline = rounded.make_outputs(),
       actual = rounded.make_outputs();
  exact.forward(ref, truth);
  rounded.forward(ref, baseline);
  rounded.forward(cpu, actual);
  const auto max_err = [](const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double{a[i]} - b[i]));
    return m;
  };
  const double base_o = max_err(baseline.o[0], truth.o[0]);
  EXPECT_GT(base_o, 0.0);
  EXPECT_LE(max_err(actual.o[0], truth.o[0]), 2 * base_o);
  EXPECT_LE(max_err(actual.lse[0], truth.lse[0]), 2 * max_err(baseline.lse[0], truth.lse[0]));
}

TEST(CpuKernels, Bf16ForwardErrorStaysWithinTwiceTheInputRoundingBaseline) {
  expect_low_precision_within_twice_the_rounding_baseline(ElementType::kBf16);
}

TEST(CpuKernels, Fp16ForwardErrorStaysWithinTwiceTheInputRoundingBaseline) {
  expect_low_precision_within_twice_the_rounding_baseline(ElementType::kFp16);
}

}  // namespace
}  // namespace dcp::kernels
