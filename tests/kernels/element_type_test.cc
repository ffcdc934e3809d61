// SPDX-License-Identifier: Apache-2.0
// The storage conversions round to nearest even, keep NaN and infinity, and round-trip exactly.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels {
namespace {

float round_trip(ElementType type, float x) {
  std::uint16_t stored = 0;
  from_float(type, &x, &stored, 1);
  float back = 0;
  to_float(type, &stored, &back, 1);
  return back;
}

TEST(ElementType, NamesAndSizesAreFixed) {
  EXPECT_EQ(to_string(ElementType::kFp32), "fp32");
  EXPECT_EQ(to_string(ElementType::kBf16), "bf16");
  EXPECT_EQ(to_string(ElementType::kFp16), "fp16");
  EXPECT_EQ(element_size(ElementType::kFp32), 4u);
  EXPECT_EQ(element_size(ElementType::kBf16), 2u);
  EXPECT_EQ(element_size(ElementType::kFp16), 2u);
}

TEST(ElementType, Fp32ConversionCopiesBitsExactly) {
  const std::vector<float> src{1.5f, -0.0f, std::numeric_limits<float>::denorm_min(), 3e38f};
  std::vector<float> mid(src.size()), back(src.size());
  from_float(ElementType::kFp32, src.data(), mid.data(), src.size());
  to_float(ElementType::kFp32, mid.data(), back.data(), src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::bit_cast<std::uint32_t>(src[i]));
  }
}

TEST(ElementType, Bf16RoundsHalfwayCasesToEven) {
  const auto bf = ElementType::kBf16;
  EXPECT_EQ(round_trip(bf, 1.0f + 0x1.0p-8f), 1.0f);                  // tie, 1.0 is even
  EXPECT_EQ(round_trip(bf, 1.0f + 3 * 0x1.0p-8f), 1.0f + 0x1.0p-6f);  // tie, rounds up to even
  EXPECT_EQ(round_trip(bf, 1.0f + 0x1.0p-8f + 0x1.0p-20f), 1.0f + 0x1.0p-7f);  // above the tie
  EXPECT_EQ(round_trip(bf, -1.0f - 3 * 0x1.0p-8f), -1.0f - 0x1.0p-6f);
  // The largest finite bf16 is 0x7F7F; halfway above it rounds to infinity.
  EXPECT_EQ(round_trip(bf, std::bit_cast<float>(0x7F7F8000u)),
            std::numeric_limits<float>::infinity());
}

TEST(ElementType, Bf16KeepsNanAndInfinityAndRoundTripsEveryPattern) {
  EXPECT_TRUE(std::isnan(round_trip(ElementType::kBf16, std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload is only in the low bits must not truncate to infinity.
  EXPECT_TRUE(std::isnan(round_trip(ElementType::kBf16, std::bit_cast<float>(0x7F800001u))));
  EXPECT_EQ(round_trip(ElementType::kBf16, -std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    float f = 0;
    to_float(ElementType::kBf16, &h, &f, 1);
    std::uint16_t again = 0;
    from_float(ElementType::kBf16, &f, &again, 1);
    if (std::isnan(f)) {
      EXPECT_EQ(again & 0x7FC0u, 0x7FC0u) << bits;
    } else {
      ASSERT_EQ(again, h) << bits;
    }
  }
}

TEST(ElementType, Fp16RoundsHalfwayCasesToEvenIncludingSubnormalsAndOverflow) {
  const auto fp = ElementType::kFp16;
  EXPECT_EQ(round_trip(fp, 1.0f + 0x1.0p-11f), 1.0f);
  EXPECT_EQ(round_trip(fp, 1.0f + 3 * 0x1.0p-11f), 1.0f + 0x1.0p-9f);
  EXPECT_EQ(round_trip(fp, 65504.0f), 65504.0f);
  EXPECT_EQ(round_trip(fp, 65519.0f), 65504.0f);
  EXPECT_EQ(round_trip(fp, 65520.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_trip(fp, -1e9f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_trip(fp, 0x1.0p-24f), 0x1.0p-24f);       // smallest subnormal
  EXPECT_EQ(round_trip(fp, 0x1.0p-25f), 0.0f);             // tie between 0 and 2^-24
  EXPECT_EQ(round_trip(fp, 0x1.8p-24f), 0x1.0p-23f);       // 1.5 ulp rounds to 2
  EXPECT_EQ(round_trip(fp, 0x1.4p-23f), 0x1.0p-23f);       // 2.5 ulp rounds to 2
  EXPECT_EQ(round_trip(fp, 0x1.ff4p-15f), 0x1.ffp-15f);    // 1022.5 ulp: tie to 1022
  EXPECT_EQ(round_trip(fp, 0x1.ffcp-15f), 0x1.0p-14f);     // 1023.5 ulp: tie to 1024 (normal)
  EXPECT_TRUE(std::signbit(round_trip(fp, -0x1.0p-30f)));  // underflow keeps the sign
}

TEST(ElementType, Fp16KeepsNanAndRoundTripsEveryPattern) {
  EXPECT_TRUE(std::isnan(round_trip(ElementType::kFp16, std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_trip(ElementType::kFp16, std::bit_cast<float>(0xFF800001u))));
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    float f = 0;
    to_float(ElementType::kFp16, &h, &f, 1);
    std::uint16_t again = 0;
    from_float(ElementType::kFp16, &f, &again, 1);
    if (std::isnan(f)) {
      EXPECT_EQ(again & 0x7E00u, 0x7E00u) << bits;
    } else {
      ASSERT_EQ(again, h) << bits;
    }
  }
}

TEST(ElementType, Fp16DecodesKnownValues) {
  const std::vector<std::uint16_t> bits{0x3C00, 0xC000, 0x7BFF, 0x0001, 0x0400, 0x7C00, 0x8000};
  std::vector<float> f(bits.size());
  to_float(ElementType::kFp16, bits.data(), f.data(), bits.size());
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], 65504.0f);
  EXPECT_EQ(f[3], 0x1.0p-24f);
  EXPECT_EQ(f[4], 0x1.0p-14f);
  EXPECT_EQ(f[5], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(f[6] == 0.0f && std::signbit(f[6]));
}

}  // namespace
}  // namespace dcp::kernels
