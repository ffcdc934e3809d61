// SPDX-License-Identifier: Apache-2.0
// The binary plan file's fixed layout (docs/plan_format.md), shared by its writer
// (plan_file_write.cc) and its reader (plan_file_read.cc): offsets, limits, opcodes, and
// little-endian fields at fixed offsets. Not part of the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "dcp/program/plan_file/plan_file.h"

namespace dcp::plan_file_detail {

inline constexpr char kMagic[] = {'D', 'C', 'P', 'P', 'L', 'A', 'N', '\0'};
inline constexpr std::size_t kMagicBytes = sizeof(kMagic);
// Fixed offsets: the header size follows the magic and the version; the strategy's length ends
// the fixed part of the header.
inline constexpr std::size_t kHeaderBytesAt = 12;
inline constexpr std::size_t kPreambleBytes = 20;
inline constexpr std::size_t kStrategyLengthAt = 91;
inline constexpr std::size_t kFixedHeaderBytes = 95;
inline constexpr std::size_t kSectionEntryBytes = 29;
inline constexpr std::size_t kChecksumBytes = 8;
inline constexpr std::uint64_t kMaxDevices = 65536;  // validate(ClusterShape)
inline constexpr std::uint64_t kMinHeaderBytes = kFixedHeaderBytes + 4 + kChecksumBytes;
inline constexpr std::uint64_t kMaxHeaderBytes =
    kMinHeaderBytes + kMaxStrategyBytes + 2 * kMaxDevices * kSectionEntryBytes;

// An opcode is the Instruction's variant index; the file format fixes the order.
static_assert(std::variant_size_v<Instruction> == 11);
static_assert(std::is_same_v<std::variant_alternative_t<0, Instruction>, Load>);
static_assert(std::is_same_v<std::variant_alternative_t<1, Instruction>, Store>);
static_assert(std::is_same_v<std::variant_alternative_t<2, Instruction>, Launch>);
static_assert(std::is_same_v<std::variant_alternative_t<3, Instruction>, Wait>);
static_assert(std::is_same_v<std::variant_alternative_t<4, Instruction>, AttnForward>);
static_assert(std::is_same_v<std::variant_alternative_t<5, Instruction>, AttnBackward>);
static_assert(std::is_same_v<std::variant_alternative_t<6, Instruction>, Merge>);
static_assert(std::is_same_v<std::variant_alternative_t<7, Instruction>, Sum>);
static_assert(std::is_same_v<std::variant_alternative_t<8, Instruction>, Free>);
static_assert(std::is_same_v<std::variant_alternative_t<9, Instruction>, Keep>);
static_assert(std::is_same_v<std::variant_alternative_t<10, Instruction>, Restore>);
inline constexpr int kOpcodeCount = 11;

inline std::uint64_t load_u64(std::string_view bytes, std::size_t at) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

inline std::uint32_t load_u32(std::string_view bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    value |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

inline void store_u64(std::string& bytes, std::size_t at, std::uint64_t value) {
  for (std::size_t i = 0; i < 8; ++i) {
    bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  }
}

template <typename E>
constexpr std::uint8_t code(E value) {
  return static_cast<std::uint8_t>(value);
}

inline std::uint64_t header_size(std::size_t strategy_bytes, std::size_t sections) {
  return kMinHeaderBytes + strategy_bytes + sections * kSectionEntryBytes;
}

}  // namespace dcp::plan_file_detail
