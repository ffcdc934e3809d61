// SPDX-License-Identifier: Apache-2.0
// The CPU backward matches the fp64 reference (masks, GQA, odd sizes, accumulation), is
// deterministic for a thread count, agrees across thread counts, and stays NaN-free.
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

// The row statistics both kernels start from: lse of the reference forward over all tiles and
// delta = rowsum(dout * o).
struct Stats {
  Outputs forward;
  std::vector<std::vector<float>> delta;
};

Stats stats_of(const AttentionCase& c) {
  ReferenceKernels ref;
  Stats s{c.make_outputs(), {}};
  c.forward(ref, s.forward);
  s.delta = c.deltas(s.forward);
  return s;
}

void expect_backward_matches_reference(const AttentionCase& c, int threads, double floor = 1e-30) {
  const Stats s = stats_of(c);
  ReferenceKernels ref;
  CpuKernels cpu(threads);
  auto expected = c.make_outputs();
  c.backward(ref, s.forward, s.delta, expected);
  auto actual = c.make_outputs(77.0f);  // overwrite must not read the old contents
  c.backward(cpu, s.forward, s.delta, actual);
  testing::expect_all_close(actual, expected, kFp32Tolerance, false, true, floor);
}

TEST(CpuKernels, BackwardMatchesReferenceOnFullTile) {
  AttentionCase c(attention_params(1, 1, 64), 51);
  c.add_tile(c.add_row(200), 300, testing::full_mask());
  expect_backward_matches_reference(c, 2);
}

TEST(CpuKernels, BackwardMatchesReferenceOnCausalTile) {
  AttentionCase c(attention_params(8, 2, 96), 52);
  c.add_tile(c.add_row(270), 270, testing::causal_mask(270, 270, 0));
  expect_backward_matches_reference(c, 2);
}

TEST(CpuKernels, BackwardMatchesReferenceOnRandomMasksForEveryHeadShape) {
  std::uint64_t seed = 60;
  for (auto [qh, kvh] : {std::pair{8, 2}, std::pair{4, 4}, std::pair{2, 1}}) {
    for (std::int32_t d : {1, 3, 64, 96, 128}) {
      SCOPED_TRACE(to_size(qh * 1000 + kvh * 100 + d));
      AttentionCase c(attention_params(qh, kvh, d), ++seed);
      testing::add_mixed_rows(c);
      expect_backward_matches_reference(c, 3);
    }
  }
}

TEST(CpuKernels, BackwardHandlesOneTokenTilesEmptyRowsAndEmptyTiles) {
  AttentionCase c(attention_params(2, 1, 5), 70);
  c.add_tile(c.add_row(1), 1, testing::full_mask());
  const std::size_t b = c.add_row(1);
  c.add_tile(b, 1, testing::full_mask());
  c.add_tile(b, 7, testing::causal_mask(1, 7, 2));
  const std::size_t e = c.add_row(6);
  c.add_tile(e, 1, testing::random_mask(c.rng(), 6, 1, 1, 0.4));
  c.add_tile(e, 9, testing::MaskData{false, {0, 0, 0, 0, 0, 0, 0}, {}});  // nothing attends
  c.add_row(3);                                                           // no tiles
  const std::size_t z = c.add_row(0);  // no queries: an overwriting tile still gets zeros
  c.add_tile(z, 4, testing::full_mask());
  // A row with one key has dS = 1 * (dP - delta) = 0 up to rounding: bound that absolutely
  // (inputs are O(1)).
  expect_backward_matches_reference(c, 2, 1e-6);

  const Stats s = stats_of(c);
  CpuKernels cpu(2);
  auto out = c.make_outputs(9.0f);
  c.backward(cpu, s.forward, s.delta, out);
  for (float x : out.dq[3]) EXPECT_EQ(x, 0.0f);
  for (float x : out.dk[2][1]) EXPECT_EQ(x, 0.0f);
  for (float x : out.dv[4][0]) EXPECT_EQ(x, 0.0f);
}

TEST(CpuKernels, FullyMaskedRowsContributeZeroGradientsAndNoNan) {
  AttentionCase c(attention_params(2, 1, 16), 71);
  const std::size_t row = c.add_row(6);
  c.add_tile(row, 10, testing::MaskData{false, {0, 1, 1, 2, 3, 3, 4}, {0, 4, 2, 3, 5, 10, 9, 10}});
  const Stats s = stats_of(c);
  CpuKernels cpu(2);
  auto out = c.make_outputs();
  c.backward(cpu, s.forward, s.delta, out);
  for (std::int32_t r : {1, 4}) {
    for (std::int32_t x = 0; x < 32; ++x) EXPECT_EQ(out.dq[0][to_size(r * 32 + x)], 0.0f);
  }
  for (float x : out.dq[0]) EXPECT_FALSE(std::isnan(x));
  for (float x : out.dk[0][0]) EXPECT_FALSE(std::isnan(x));
  for (float x : out.dv[0][0]) EXPECT_FALSE(std::isnan(x));
  expect_backward_matches_reference(c, 1);
}

TEST(CpuKernels, AccumulatingBackwardAddsToTheExistingGradients) {
  AttentionCase c(attention_params(4, 2, 24), 72);
  const std::size_t row = c.add_row(130);
  c.add_tile(row, 140, testing::causal_mask(130, 140, 10));
  c.add_tile(row, 50, testing::random_mask(c.rng(), 130, 50, 2, 0.3));
  const Stats s = stats_of(c);
  CpuKernels cpu(3);
  auto fresh = c.make_outputs();
  c.backward(cpu, s.forward, s.delta, fresh);
  auto added = c.make_outputs(0.5f);
  c.backward(cpu, s.forward, s.delta, added, true);
  auto shifted = fresh;
  for (auto& v : shifted.dq)
    for (auto& x : v) x += 0.5f;
  for (auto* grads : {&shifted.dk, &shifted.dv}) {
    for (auto& tiles : *grads)
      for (auto& v : tiles)
        for (auto& x : v) x += 0.5f;
  }
  testing::expect_all_close(added, shifted, 1e-6, false, true);
}

TEST(CpuKernels, BackwardThreadCountsAgreeWithinFp32RoundingAndRepeatBitForBit) {
  AttentionCase c(attention_params(8, 2, 64), 73);
  const std::size_t row = c.add_row(260);
  c.add_tile(row, 300, testing::random_mask(c.rng(), 260, 300, 3, 0.1));
  c.add_tile(row, 129, testing::full_mask());
  c.add_tile(c.add_row(100), 250, testing::causal_mask(100, 250, 150));
  const Stats s = stats_of(c);
  std::vector<Outputs> results;
  for (int threads : {1, 2, 3}) {
    CpuKernels cpu(threads);
    results.push_back(c.make_outputs());
    c.backward(cpu, s.forward, s.delta, results.back());
    auto again = c.make_outputs();
    c.backward(cpu, s.forward, s.delta, again);
    EXPECT_EQ(again.dq, results.back().dq) << threads;  // deterministic for a thread count
    EXPECT_EQ(again.dk, results.back().dk) << threads;
  }
  // dk and dv are owned by one task each, so they agree bit for bit; dq sums per-thread
  // buffers, whose grouping depends on the thread count: fp32 rounding only.
  EXPECT_EQ(results[0].dk, results[2].dk);
  EXPECT_EQ(results[0].dv, results[1].dv);
  testing::expect_all_close(results[1], results[0], 1e-5, false, true);
  testing::expect_all_close(results[2], results[0], 1e-5, false, true);
}

TEST(CpuKernels, BackwardStaysNanFreeAndAccurateWithLargeScores) {
  AttentionParams p = attention_params(2, 1, 16);
  p.softmax_scale = 8.0f;
  AttentionCase c(p, 74, 4.0);
  const std::size_t row = c.add_row(70);
  c.add_tile(row, 150, testing::random_mask(c.rng(), 70, 150, 3, 0.2));
  c.add_tile(row, 40, testing::full_mask());
  const Stats s = stats_of(c);
  CpuKernels cpu(2);
  auto out = c.make_outputs();
  c.backward(cpu, s.forward, s.delta, out);
  for (float x : out.dq[0]) ASSERT_TRUE(std::isfinite(x));
  for (const auto& t : out.dk[0])
    for (float x : t) ASSERT_TRUE(std::isfinite(x));
  // Large scores make P nearly one-hot, so dS amplifies the fp32 rounding of s by the scale:
  // compare at a looser tolerance here.
  ReferenceKernels ref;
  auto expected = c.make_outputs();
  c.backward(ref, s.forward, s.delta, expected);
  testing::expect_all_close(out, expected, 2e-3, false, true);
}

// As for the forward: the cpu kernel on bf16 inputs must be within twice the error that rounding
// the inputs to bf16 causes in an exact (fp64) backward.
TEST(CpuKernels, Bf16BackwardErrorStaysWithinTwiceTheInputRoundingBaseline) {
  AttentionCase rounded(attention_params(4, 2, 64, ElementType::kBf16), 75);
  AttentionCase exact(attention_params(4, 2, 64, ElementType::kFp32), 75);
  for (AttentionCase* c : {&rounded, &exact}) {
    const std::size_t row = c->add_row(150);
    c->add_tile(row, 180, testing::causal_mask(150, 180, 30));
    c->add_tile(row, 70, testing::full_mask());
  }
  const Stats exact_stats = stats_of(exact);
  const Stats rounded_stats = stats_of(rounded);
  ReferenceKernels ref;
  CpuKernels cpu(2);
  auto truth = exact.make_outputs(), baseline = rounded.make_outputs(),
       actual = rounded.make_outputs();
  exact.backward(ref, exact_stats.forward, exact_stats.delta, truth);
  rounded.backward(ref, rounded_stats.forward, rounded_stats.delta, baseline);
  rounded.backward(cpu, rounded_stats.forward, rounded_stats.delta, actual);
  const auto max_err = [](const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double{a[i]} - b[i]));
    return m;
  };
  const double base_dq = max_err(baseline.dq[0], truth.dq[0]);
  EXPECT_GT(base_dq, 0.0);
  EXPECT_LE(max_err(actual.dq[0], truth.dq[0]), 2 * base_dq);
  for (std::size_t t = 0; t < 2; ++t) {
    EXPECT_LE(max_err(actual.dk[0][t], truth.dk[0][t]),
              2 * max_err(baseline.dk[0][t], truth.dk[0][t]));
    EXPECT_LE(max_err(actual.dv[0][t], truth.dv[0][t]),
              2 * max_err(baseline.dv[0][t], truth.dv[0][t]));
  }
}

}  // namespace
}  // namespace dcp::kernels
