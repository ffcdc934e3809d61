// SPDX-License-Identifier: Apache-2.0
// The schema of the lowering's tables: each table's columns (an index enum and the columns'
// names), the buffers a value can lie in and the kinds of memory runs. The C++ devices index rows
// with the enums; the binding exports the names (dcp._core.LOWERING_SCHEMA), from which the Triton
// device and its kernels take every column index, so no consumer restates the layout.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace dcp::runtime {

// Slot offsets are multiples of this from the arena's start, kept values' from the kept tensor's.
inline constexpr std::int64_t kSlotAlignment = 64;

// Where a value lies: the pass's buffer table (arena) or the kept tensor (the kv values the
// forward pass receives and keeps for the backward pass).
enum class BufferKind : std::uint8_t { kArena, kKept };
inline constexpr std::array<std::string_view, 2> kBufferKindNames = {"arena", "kept"};

// A run of Merges (log-sum-exp) or of Sums (fp32 adds).
enum class MemoryRunKind : std::uint8_t { kMerge, kSum };
inline constexpr std::array<std::string_view, 2> kMemoryRunKindNames = {"merge", "sum"};

// Attention entries, one per (row, kv value) of an attention instruction. q_off: the kQ or kQGrad
// slot; kv_off: the kKV slot, or the kv value's place in the kept tensor (kv_buffer says which,
// a BufferKind); mask: -1 for a full tile, else the row start in AttentionTables::mask_rows;
// q_group, kv_group: the groups the entry contributes to, -1 for none.
enum EntryField : int {
  kEntryQ,
  kEntryKv,
  kEntryQTokens,
  kEntryKvTokens,
  kEntryMask,
  kEntryQGroup,
  kEntryKvGroup,
  kEntryKvBuffer,
  kEntryFields  // the row width
};
inline constexpr std::array<std::string_view, kEntryFields> kEntryColumns = {
    "q_off", "kv_off", "q_tokens", "kv_tokens", "mask", "q_group", "kv_group", "kv_buffer"};

// Groups (q groups and kv groups alike): one output and the entries contributing to it,
// AttentionTables::members[member_begin, member_end), all reading the value at input_off.
enum GroupField : int {
  kGroupOut,
  kGroupTokens,
  kGroupAccumulate,
  kGroupBegin,
  kGroupEnd,
  kGroupInput,
  kGroupFields
};
inline constexpr std::array<std::string_view, kGroupFields> kGroupColumns = {
    "out_off", "tokens", "accumulate", "member_begin", "member_end", "input_off"};

// Copies, one per Load or Store of a copy run: slot offset, first local token, tokens, head block.
enum CopyField : int { kCopySlot, kCopyToken, kCopyTokens, kCopyHeadBlock, kCopyFields };
inline constexpr std::array<std::string_view, kCopyFields> kCopyColumns = {"slot_off", "token",
                                                                           "tokens", "head_block"};

// Partial conversions, one per partial a launch narrows or widens: its fp32 slot, its wire
// buffer, the fp32 values converted and the bytes after them copied as they are.
enum WireField : int { kWireSlot, kWireOffset, kWireElements, kWireTailBytes, kWireFields };
inline constexpr std::array<std::string_view, kWireFields> kWireColumns = {
    "slot_off", "wire_off", "elements", "tail_bytes"};

// Merges and Sums, one per instruction of a memory run: destination and source slot offsets,
// then tokens (a Merge) or fp32 elements (a Sum).
enum MemoryField : int { kMemoryDst, kMemorySrc, kMemoryCount, kMemoryFields };
inline constexpr std::array<std::string_view, kMemoryFields> kMemoryColumns = {"dst_off", "src_off",
                                                                               "count"};

// The int64 tables of a LoweredPass with rows of columns (lowered_rows returns one), by name.
enum class LoweredTable : std::uint8_t {
  kEntries,
  kQGroups,
  kKvGroups,
  kCopyRows,
  kWireRows,
  kMemoryRows
};
struct LoweredTableSchema {
  LoweredTable table;
  std::string_view name;
  std::span<const std::string_view> columns;
};
inline constexpr std::array<LoweredTableSchema, 6> kLoweredTables = {{
    {LoweredTable::kEntries, "entries", kEntryColumns},
    {LoweredTable::kQGroups, "q_groups", kGroupColumns},
    {LoweredTable::kKvGroups, "kv_groups", kGroupColumns},
    {LoweredTable::kCopyRows, "copy_rows", kCopyColumns},
    {LoweredTable::kWireRows, "wire_rows", kWireColumns},
    {LoweredTable::kMemoryRows, "memory_rows", kMemoryColumns},
}};

}  // namespace dcp::runtime
