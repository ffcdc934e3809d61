// SPDX-License-Identifier: Apache-2.0
// The fp64 oracle agrees with a per-element formula, with finite differences of its own forward,
// and ReferenceKernels' multi-tile and accumulating calls agree with single calls.
#include "dcp/kernels/reference/reference_attention.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "tests/kernels/attention_case.h"

namespace dcp::kernels {
namespace {

using testing::AttentionCase;
using testing::MaskData;

struct Problem {
  AttentionParams params;
  std::int32_t lq = 0, lk = 0;
  std::vector<double> q, k, v, dout;
  MaskData mask;
};

Problem random_problem(std::uint64_t seed, std::int32_t qh, std::int32_t kvh, std::int32_t d,
                       std::int32_t lq, std::int32_t lk) {
  Rng rng(seed);
  Problem p;
  p.params.q_heads = qh;
  p.params.kv_heads = kvh;
  p.params.head_dim = d;
  p.params.softmax_scale = 0.7f;
  p.lq = lq;
  p.lk = lk;
  auto fill = [&](std::vector<double>& x, std::size_t n) {
    x.resize(n);
    for (auto& e : x) e = rng.normal();
  };
  fill(p.q, to_size(std::int64_t{lq} * qh * d));
  fill(p.dout, p.q.size());
  fill(p.k, to_size(std::int64_t{lk} * kvh * d));
  fill(p.v, p.k.size());
  p.mask = testing::random_mask(rng, lq, lk, 3, 0.25);
  return p;
}

// Per element, straight from the definitions: s, p = softmax over attended keys, o = sum p v.
void naive_forward(const Problem& p, std::vector<double>& o, std::vector<double>& lse) {
  const std::int32_t qh = p.params.q_heads, kvh = p.params.kv_heads, d = p.params.head_dim;
  o.assign(p.q.size(), 0.0);
  lse.assign(to_size(std::int64_t{p.lq} * qh), kNegInf);
  for (std::int32_t j = 0; j < qh; ++j) {
    const std::int32_t h = j / (qh / kvh);
    for (std::int32_t r = 0; r < p.lq; ++r) {
      std::vector<double> s(to_size(p.lk), kNegInf);
      double m = kNegInf;
      for (std::int32_t c = 0; c < p.lk; ++c) {
        if (!p.mask.attends(r, c)) continue;
        double dot = 0;
        for (std::int32_t x = 0; x < d; ++x) {
          dot += p.q[to_size((std::int64_t{r} * qh + j) * d + x)] *
                 p.k[to_size((std::int64_t{c} * kvh + h) * d + x)];
        }
        s[to_size(c)] = double{p.params.softmax_scale} * dot;
        m = std::max(m, s[to_size(c)]);
      }
      if (m == kNegInf) continue;
      double sum = 0;
      for (std::int32_t c = 0; c < p.lk; ++c)
        sum += s[to_size(c)] == kNegInf ? 0.0 : std::exp(s[to_size(c)] - m);
      const double l = m + std::log(sum);
      lse[to_size(std::int64_t{j} * p.lq + r)] = l;
      for (std::int32_t c = 0; c < p.lk; ++c) {
        if (s[to_size(c)] == kNegInf) continue;
        const double w = std::exp(s[to_size(c)] - l);
        for (std::int32_t x = 0; x < d; ++x) {
          o[to_size((std::int64_t{r} * qh + j) * d + x)] +=
              w * p.v[to_size((std::int64_t{c} * kvh + h) * d + x)];
        }
      }
    }
  }
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // also equal infinities
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

TEST(ReferenceAttention, ForwardMatchesThePerElementFormula) {
  for (auto [qh, kvh, d] : {std::tuple{2, 1, 3}, std::tuple{4, 2, 5}, std::tuple{1, 1, 1}}) {
    const Problem p = random_problem(11, qh, kvh, d, 70, 90);  // 70 rows: two row chunks
    std::vector<double> o(p.q.size()), lse(to_size(std::int64_t{p.lq} * qh)), o2, lse2;
    reference_forward(p.params, p.lq, p.lk, p.q.data(), p.k.data(), p.v.data(), p.mask.view(),
                      o.data(), lse.data());
    naive_forward(p, o2, lse2);
    EXPECT_LT(max_abs_diff(o, o2), 1e-12);
    EXPECT_LT(max_abs_diff(lse, lse2), 1e-12);
  }
}

TEST(ReferenceAttention, FullyMaskedRowsGiveZeroOutputAndNegativeInfinityLse) {
  Problem p = random_problem(12, 2, 1, 4, 3, 5);
  p.mask = MaskData{false, {0, 0, 1, 1}, {1, 3}};  // rows 0 and 2 attend nothing
  std::vector<double> o(p.q.size(), 7.0), lse(6, 7.0);
  reference_forward(p.params, p.lq, p.lk, p.q.data(), p.k.data(), p.v.data(), p.mask.view(),
                    o.data(), lse.data());
  for (std::int32_t j = 0; j < 2; ++j) {
    for (std::int32_t r : {0, 2}) {
      EXPECT_EQ(lse[to_size(j * 3 + r)], kNegInf);
      for (std::int32_t x = 0; x < 4; ++x) EXPECT_EQ(o[to_size((r * 2 + j) * 4 + x)], 0.0);
    }
    EXPECT_TRUE(std::isfinite(lse[to_size(j * 3 + 1)]));
  }
  std::vector<double> delta(6), dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  reference_delta(3, 2, 4, o.data(), p.dout.data(), delta.data());
  reference_backward(p.params, p.lq, p.lk, p.q.data(), p.k.data(), p.v.data(), p.mask.view(),
                     p.dout.data(), lse.data(), delta.data(), dq.data(), dk.data(), dv.data());
  for (std::int32_t r : {0, 2}) {
    for (std::int32_t x = 0; x < 8; ++x) EXPECT_EQ(dq[to_size(r * 8 + x)], 0.0);
  }
  for (double x : dq) EXPECT_FALSE(std::isnan(x));
  for (std::int32_t c : {0, 3, 4}) {  // keys nobody attends get no gradient
    for (std::int32_t x = 0; x < 4; ++x) {
      EXPECT_EQ(dk[to_size(c * 4 + x)], 0.0);
      EXPECT_EQ(dv[to_size(c * 4 + x)], 0.0);
    }
  }
}

// The backward is the gradient of L = sum dout * o: compare with central differences of the
// forward in every input.
TEST(ReferenceAttention, BackwardMatchesFiniteDifferencesOfTheForward) {
  Problem p = random_problem(13, 4, 2, 3, 5, 6);
  const auto loss = [&](const Problem& x) {
    std::vector<double> o(x.q.size()), lse(to_size(std::int64_t{x.lq} * x.params.q_heads));
    reference_forward(x.params, x.lq, x.lk, x.q.data(), x.k.data(), x.v.data(), x.mask.view(),
                      o.data(), lse.data());
    double sum = 0;
    for (std::size_t i = 0; i < o.size(); ++i) sum += o[i] * x.dout[i];
    return sum;
  };
  std::vector<double> o(p.q.size()), lse(to_size(std::int64_t{p.lq} * 4)), delta(lse.size());
  reference_forward(p.params, p.lq, p.lk, p.q.data(), p.k.data(), p.v.data(), p.mask.view(),
                    o.data(), lse.data());
  reference_delta(p.lq, 4, 3, o.data(), p.dout.data(), delta.data());
  std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  reference_backward(p.params, p.lq, p.lk, p.q.data(), p.k.data(), p.v.data(), p.mask.view(),
                     p.dout.data(), lse.data(), delta.data(), dq.data(), dk.data(), dv.data());
  constexpr double kStep = 1e-6;
  const auto check = [&](std::vector<double> Problem::*field, const std::vector<double>& grad) {
    for (std::size_t i = 0; i < grad.size(); ++i) {
      Problem plus = p, minus = p;
      (plus.*field)[i] += kStep;
      (minus.*field)[i] -= kStep;
      const double numeric = (loss(plus) - loss(minus)) / (2 * kStep);
      EXPECT_NEAR(grad[i], numeric, 1e-6) << i;
    }
  };
  check(&Problem::q, dq);
  check(&Problem::k, dk);
  check(&Problem::v, dv);
}

TEST(ReferenceKernels, AccumulatingTileByTileEqualsOneCallOverAllTiles) {
  AttentionParams params;
  params.q_heads = 4;
  params.kv_heads = 2;
  params.head_dim = 8;
  params.softmax_scale = 0.4f;
  AttentionCase c(params, 14);
  const std::size_t row = c.add_row(20);
  c.add_tile(row, 9, testing::random_mask(c.rng(), 20, 9, 2, 0.3));
  c.add_tile(row, 15, testing::full_mask());
  c.add_tile(row, 6, testing::causal_mask(20, 6, -8));
  ReferenceKernels ref;
  auto whole = c.make_outputs();
  c.forward(ref, whole);
  auto split = c.make_outputs();
  c.forward(ref, split, false, 0, 1);
  c.forward(ref, split, true, 1, 2);
  c.forward(ref, split, true, 2, 3);
  testing::expect_all_close(split, whole, 1e-6, true, false);
}

}  // namespace
}  // namespace dcp::kernels
