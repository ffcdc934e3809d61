// SPDX-License-Identifier: Apache-2.0
// merge, add and delta of the CPU kernels match the reference kernels, -inf cases included.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

#include "dcp/kernels/cpu/cpu_attention.h"
#include "dcp/kernels/reference/reference_attention.h"

namespace dcp::kernels {
namespace {

std::vector<float> normals(Rng& rng, std::size_t n) {
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

TEST(CpuKernels, MergeMatchesReferenceIncludingNegativeInfinityPartials) {
  Rng rng(81);
  const std::int32_t tokens = 300, heads = 3, d = 7;  // several parallel pieces
  const std::size_t n = tokens * heads * d, m = tokens * heads;
  auto o1 = normals(rng, n), o2 = normals(rng, n), l1 = normals(rng, m), l2 = normals(rng, m);
  l1[0] = kNegInf;                // one side empty
  l2[1] = kNegInf;                // the other side empty
  l1[2] = l2[2] = kNegInf;        // both empty: o = 0, lse = -inf
  l1[3] = 80.0f, l2[3] = -80.0f;  // far apart
  auto ro = o1, rl = l1;
  CpuKernels cpu(3);
  ReferenceKernels ref;
  cpu.merge(o1.data(), l1.data(), o2.data(), l2.data(), tokens, heads, d);
  ref.merge(ro.data(), rl.data(), o2.data(), l2.data(), tokens, heads, d);
  for (std::size_t i = 0; i < n; ++i) EXPECT_NEAR(o1[i], ro[i], 1e-5) << i;
  for (std::size_t i = 0; i < m; ++i) {
    if (std::isinf(rl[i])) {
      EXPECT_EQ(l1[i], rl[i]);
    } else {
      EXPECT_NEAR(l1[i], rl[i], 1e-5) << i;
    }
  }
  EXPECT_EQ(l1[2], kNegInf);
  // Token 0, head 2 is lse index 2 * tokens; token 2, head 0 is index 2: o of token 2 head 0.
  for (std::int32_t x = 0; x < d; ++x)
    EXPECT_EQ(o1[static_cast<std::size_t>(2 * heads * d + x)], 0.0f);
}

TEST(CpuKernels, AddSumsElementwiseOverSeveralPieces) {
  Rng rng(82);
  const std::size_t n = 100000;
  auto a = normals(rng, n), b = normals(rng, n);
  auto expected = a;
  for (std::size_t i = 0; i < n; ++i) expected[i] += b[i];
  CpuKernels cpu(2);
  cpu.add(a.data(), b.data(), n);
  EXPECT_EQ(a, expected);
}

TEST(CpuKernels, DeltaMatchesReferenceForEachStorageType) {
  Rng rng(83);
  const std::int32_t tokens = 50, heads = 4, d = 96;
  const std::size_t n = tokens * heads * d;
  for (ElementType type : {ElementType::kFp32, ElementType::kBf16, ElementType::kFp16}) {
    const auto of = normals(rng, n), df = normals(rng, n);
    std::vector<unsigned char> o(n * 4), dout(n * 4);
    from_float(type, of.data(), o.data(), n);
    from_float(type, df.data(), dout.data(), n);
    std::vector<float> got(tokens * heads), want(tokens * heads);
    CpuKernels cpu(2);
    ReferenceKernels ref;
    cpu.delta(type, o.data(), dout.data(), tokens, heads, d, got.data());
    ref.delta(type, o.data(), dout.data(), tokens, heads, d, want.data());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  }
}

TEST(CpuKernels, RejectsAShapeWhoseKvHeadsDoNotDivideTheQHeads) {
  AttentionParams p;
  p.q_heads = 3;
  p.kv_heads = 2;
  CpuKernels cpu(1);
  EXPECT_THROW(cpu.forward(p, {}), InvalidInput);
  EXPECT_THROW(cpu.backward(p, {}), InvalidInput);
}

}  // namespace
}  // namespace dcp::kernels
