// SPDX-License-Identifier: Apache-2.0
// Storage element types: names, sizes and the fp32 conversions (round to nearest even, NaN-safe).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels {
namespace {

float bf16_to_float(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

std::uint16_t float_to_bf16(float f) {
  const auto x = std::bit_cast<std::uint32_t>(f);
  // NaN: keep sign and the top payload bits but force the quiet bit, since plain truncation of a
  // NaN whose payload sits in the low 16 bits would give infinity.
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  // Round to nearest even on the 16 dropped bits: add 0x7FFF plus the lowest kept bit. A carry
  // into the exponent is correct rounding (up to infinity for the largest finite values).
  const std::uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

std::uint16_t float_to_fp16(float f) {
  const auto bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t x = bits & 0x7FFFFFFFu;
  if (x > 0x7F800000u) {  // NaN: quiet, keeping the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu));
  }
  // 65520 = 0x477FF000 is halfway between 65504 (the largest half, odd mantissa) and 2^16, so
  // ties-to-even sends it and everything above (infinity included) to infinity.
  if (x >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (x < 0x38800000u) {
    // Below 2^-14 the half is subnormal: its integer mantissa is |f| * 2^24 rounded to nearest
    // even (exact scaling by a power of two, then nearbyint in the default rounding mode). A
    // result of 1024 is the smallest normal's encoding, which is the right answer.
    const float scaled = std::bit_cast<float>(x) * 0x1.0p24f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(scaled)));
  }
  // Normal: round the 13 dropped bits to nearest even, then rebias the exponent (127 -> 15).
  const std::uint32_t rounded = x + 0xFFFu + ((x >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rounded >> 13) - (112u << 10)));
}

}  // namespace

std::string_view to_string(ElementType type) {
  switch (type) {
    case ElementType::kFp32:
      return "fp32";
    case ElementType::kBf16:
      return "bf16";
    case ElementType::kFp16:
      return "fp16";
  }
  return "unknown";
}

std::size_t element_size(ElementType type) { return type == ElementType::kFp32 ? 4 : 2; }

void to_float(ElementType type, const void* src, float* dst, std::size_t n) {
  switch (type) {
    case ElementType::kFp32:
      if (n != 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case ElementType::kBf16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      return;
    }
    case ElementType::kFp16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = fp16_to_float(s[i]);
      return;
    }
  }
}

void from_float(ElementType type, const float* src, void* dst, std::size_t n) {
  switch (type) {
    case ElementType::kFp32:
      if (n != 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case ElementType::kBf16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case ElementType::kFp16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = float_to_fp16(src[i]);
      return;
    }
  }
}

}  // namespace dcp::kernels
