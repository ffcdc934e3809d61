// SPDX-License-Identifier: Apache-2.0
// The verifier's symbolic slot values and its record of the work units computed in a pass.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dcp/program/program.h"

namespace dcp::verifier_detail {

// Sums of pairs and bytes (never negative) saturate instead of overflowing: a crafted plan may
// claim blocks of 2^31 tokens, and the verifier must still report rather than misbehave.
inline std::int64_t add_saturating(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  return b > kMax - a ? kMax : a + b;
}

// What a slot holds. Inputs carry no units; partial outputs carry the work units they gathered
// (unit_key()s) and their unmasked pairs.
struct Value {
  SlotKind kind = SlotKind::kQ;
  BlockId block = 0;
  std::int32_t head_block = 0;
  SeqIndex seq = 0;
  std::int32_t tokens = 0;
  std::vector<std::uint64_t> units;  // sorted when `sorted`
  bool sorted = true;
  std::int64_t pairs = 0;

  void reset(SlotKind new_kind, BlockId new_block, std::int32_t new_head_block, SeqIndex new_seq,
             std::int32_t new_tokens) {
    kind = new_kind;
    block = new_block;
    head_block = new_head_block;
    seq = new_seq;
    tokens = new_tokens;
    units.clear();  // keeps the capacity: slots are reused, their buffers with them
    sorted = true;
    pairs = 0;
  }
  void add(std::uint64_t unit, std::int64_t unit_pairs) {
    if (!units.empty() && unit < units.back()) sorted = false;
    units.push_back(unit);
    pairs = add_saturating(pairs, unit_pairs);
  }
  void sort() {
    if (!sorted) std::sort(units.begin(), units.end());
    sorted = true;
  }
};

// "out(block 12, head 1, 3 units, 40 pairs)", or "kv(block 3, head 0)" for an input.
std::string describe(const Value& value);

// What a slot holds: nothing, a value, or a value on its way (received, not yet waited).
enum class Held : std::uint8_t { kEmpty, kLive, kReceiving };

struct SlotState {
  Held held = Held::kEmpty;
  bool arrived = false;         // kReceiving: the matching send completed and `value` is set
  LaunchId receive_launch = 0;  // kReceiving: the launch whose wait makes the value live
  std::int32_t sends = 0;       // launches sending the value and not yet waited
  LaunchId send_launch = 0;     // the latest of them
  Value value;
};

// "slot 5 holds out(block 12, head 1, ...) which is being sent (launch 2 not waited)".
std::string describe(const SlotState& slot, SlotId id);

// The work units computed so far in a pass, and where each was computed. Units are grouped by
// (q block, head block), the units one attention row adds, and each group has its own small hash
// table of kv blocks: a row's lookups stay in one table that fits in the cache, where one table
// for the whole pass would miss the cache on almost every entry.
class UnitSet {
 public:
  struct Where {
    std::int32_t device = 0;
    std::int32_t instruction = 0;  // saturated at 2^31 - 1
  };

  // `rows`: the attention rows of the pass, at least the number of groups.
  explicit UnitSet(std::int64_t rows);

  // The group of (q block, head block), created if new.
  std::int32_t group(BlockId q_block, std::int32_t head_block);

  // Adds the unit (the group's q block and head block, kv_block), or returns where it was added
  // before. The pointer is valid until the next insert.
  const Where* insert(std::int32_t group, BlockId kv_block, std::int32_t device,
                      std::int64_t instruction);

 private:
  struct Entry {
    std::int32_t kv_plus_one = 0;  // 0 marks an empty entry
    Where where;
  };
  struct Group {
    std::vector<Entry> table;  // a power of two entries, at most half full
    std::int32_t size = 0;
    std::int32_t shift = 0;  // 32 - log2(table size), for Fibonacci hashing
  };
  struct IndexEntry {
    std::uint64_t key_plus_one = 0;  // 0 marks an empty entry
    std::int32_t group = 0;
  };

  static void place(Group& group, const Entry& entry);

  std::vector<IndexEntry> index_;  // (q block, head block) -> group
  std::size_t index_mask_ = 0;
  std::vector<Group> groups_;
};

}  // namespace dcp::verifier_detail
