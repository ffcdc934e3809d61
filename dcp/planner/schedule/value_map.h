// SPDX-License-Identifier: Apache-2.0
// A flat table from values to integers, for the per-work-unit look-ups of compilation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dcp/planner/schedule/schedule.h"

namespace dcp {

// ValueKey -> int32: an open-addressing table with linear probing. The compiler and the partial
// routing look values up for every work unit; with a node per entry (std::unordered_map),
// allocation was the larger cost.
class ValueMap {
 public:
  const std::int32_t* find(const ValueKey& key) const {
    if (slots_.empty()) return nullptr;
    const std::uint64_t packed = pack(key);
    for (std::size_t i = home(packed);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) return nullptr;
      if (slots_[i].key == packed) return &slots_[i].value;
    }
  }
  void set(const ValueKey& key, std::int32_t value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    const std::uint64_t packed = pack(key);
    std::size_t i = home(packed);
    while (slots_[i].key != kEmpty && slots_[i].key != packed) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i] = {packed, value};
  }
  // Removes `key` (present), shifting back the entries its slot displaced.
  void erase(const ValueKey& key) {
    const std::uint64_t packed = pack(key);
    std::size_t i = home(packed);
    while (slots_[i].key != packed) i = (i + 1) & mask_;
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != kEmpty; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      // Move j into the hole at i unless j's home lies cyclically in (i, j].
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].key = kEmpty;
    --size_;
  }
  bool empty() const { return size_ == 0; }
  ValueKey min_key() const {
    std::uint64_t least = kEmpty;
    for (const Slot& slot : slots_) least = std::min(least, slot.key);
    return unpack(least);
  }

 private:
  struct Slot {
    std::uint64_t key;
    std::int32_t value;
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  // kind (8 bits), block (32 bits), head block (24 bits): ordered as ValueKey is.
  static std::uint64_t pack(const ValueKey& key) {
    return static_cast<std::uint64_t>(static_cast<std::uint8_t>(key.kind)) << 56 |
           static_cast<std::uint64_t>(static_cast<std::uint32_t>(key.block)) << 24 |
           (static_cast<std::uint64_t>(static_cast<std::uint32_t>(key.head_block)) & 0xFFFFFF);
  }
  static ValueKey unpack(std::uint64_t packed) {
    return {static_cast<SlotKind>(packed >> 56), static_cast<BlockId>((packed >> 24) & 0xFFFFFFFF),
            static_cast<std::int32_t>(packed & 0xFFFFFF)};
  }
  std::size_t home(std::uint64_t packed) const {
    // Folded before the multiply, so that the kind's top bits reach the slot too.
    std::uint64_t h = (packed ^ (packed >> 31)) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h ^ (h >> 32)) & mask_;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{kEmpty, 0});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& slot : old) {
      if (slot.key == kEmpty) continue;
      std::size_t i = home(slot.key);
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = slot;
      ++size_;
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace dcp
