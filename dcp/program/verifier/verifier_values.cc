// SPDX-License-Identifier: Apache-2.0
// The verifier's value descriptions and its per-row-grouped set of computed work units.
#include "dcp/program/verifier/verifier_values.h"

#include <limits>

#include "dcp/program/verifier/verifier_detail.h"

namespace dcp::verifier_detail {
namespace {

constexpr std::int32_t kInitialGroupShift = 32 - 3;  // 8 entries

std::size_t mix(std::uint64_t x) {  // the splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<std::size_t>(x ^ (x >> 31));
}

}  // namespace

std::string describe(const Value& value) {
  std::string text =
      cat(to_string(value.kind), "(block ", value.block, ", head ", value.head_block);
  if (is_output(value.kind)) {
    text += cat(", ", value.units.size(), " units, ", value.pairs, " pairs");
  }
  return text + ")";
}

std::string describe(const SlotState& slot, SlotId id) {
  const std::string name = cat("slot ", id);
  switch (slot.held) {
    case Held::kEmpty:
      return cat(name, " is empty");
    case Held::kReceiving:
      return cat(name, slot.arrived ? cat(" holds ", describe(slot.value)) : " awaits a value",
                 " which is still being received (launch ", slot.receive_launch, " not waited)");
    case Held::kLive:
      return cat(name, " holds ", describe(slot.value),
                 slot.sends > 0
                     ? cat(" which is being sent (launch ", slot.send_launch, " not waited)")
                     : std::string());
  }
  return name;
}

UnitSet::UnitSet(std::int64_t rows) {
  std::size_t size = 16;
  while (size < 2 * static_cast<std::size_t>(std::max<std::int64_t>(rows, 0))) size *= 2;
  index_.resize(size);
  index_mask_ = size - 1;
}

std::int32_t UnitSet::group(BlockId q_block, std::int32_t head_block) {
  const std::uint64_t key =
      (static_cast<std::uint64_t>(q_block) << kHeadBits) | static_cast<std::uint64_t>(head_block);
  for (std::size_t i = mix(key) & index_mask_;; i = (i + 1) & index_mask_) {
    IndexEntry& entry = index_[i];
    if (entry.key_plus_one == key + 1) return entry.group;
    if (entry.key_plus_one == 0) {
      entry = {key + 1, static_cast<std::int32_t>(groups_.size())};
      Group& created = groups_.emplace_back();
      created.table.resize(std::size_t{1} << (32 - kInitialGroupShift));
      created.shift = kInitialGroupShift;
      return entry.group;
    }
  }
}

void UnitSet::place(Group& group, const Entry& entry) {
  const std::size_t mask = group.table.size() - 1;
  // Fibonacci hashing: the high bits of kv times 2^32 / golden ratio.
  const std::uint32_t hash = static_cast<std::uint32_t>(entry.kv_plus_one) * 0x9e3779b1U;
  for (std::size_t i = hash >> group.shift;; i = (i + 1) & mask) {
    if (group.table[i].kv_plus_one == 0) {
      group.table[i] = entry;
      return;
    }
  }
}

const UnitSet::Where* UnitSet::insert(std::int32_t group_id, BlockId kv_block, std::int32_t device,
                                      std::int64_t instruction) {
  Group& group = groups_[static_cast<std::size_t>(group_id)];
  const std::int32_t kv_plus_one = kv_block + 1;
  const std::size_t mask = group.table.size() - 1;
  const std::uint32_t hash = static_cast<std::uint32_t>(kv_plus_one) * 0x9e3779b1U;
  for (std::size_t i = hash >> group.shift;; i = (i + 1) & mask) {
    const Entry& entry = group.table[i];
    if (entry.kv_plus_one == kv_plus_one) return &entry.where;
    if (entry.kv_plus_one == 0) break;
  }
  if (2 * (static_cast<std::size_t>(group.size) + 1) > group.table.size()) {
    std::vector<Entry> old(group.table.size() * 2);
    old.swap(group.table);
    --group.shift;
    for (const Entry& entry : old) {
      if (entry.kv_plus_one != 0) place(group, entry);
    }
  }
  const auto saturated = static_cast<std::int32_t>(
      std::min<std::int64_t>(instruction, std::numeric_limits<std::int32_t>::max()));
  place(group, Entry{kv_plus_one, Where{device, saturated}});
  ++group.size;
  return nullptr;
}

}  // namespace dcp::verifier_detail
