// SPDX-License-Identifier: Apache-2.0
// Max-min fair rates of transfer classes over shared link sides, each class's transfers at most
// a cap: the simulator's network solves this at every event (docs/simulator.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dcp::sim {

// Transfers that use the same two link sides (resources) and so progress at one rate.
struct FairShareClass {
  std::size_t first = 0, second = 0;  // resources, first != second
  double transfers = 0;               // in flight, > 0
  double cap = 0;                     // the most one of them may reach
};

// Progressive filling: repeatedly, the link side with the smallest fair share (its capacity left
// over the transfers it still carries; ties to the lower index) fixes the rate of every class on
// it at that share, except that while some class's cap is below the smallest share, the classes
// below it are fixed at their caps first. The arithmetic, and so every rounding, is that of
// doing exactly this over all classes and resources per round; the rounds themselves cost only
// the classes and resources they fix (heaps), so a network of thousands of devices is cheap.
class FairShare {
 public:
  // Per-transfer rates of `classes` (one per class, in order) over resources of `capacity`.
  // Every class's resources index `capacity`.
  void solve(const std::vector<double>& capacity, const std::vector<FairShareClass>& classes,
             std::vector<double>& rates);

 private:
  struct Entry {
    double key;
    std::size_t index;
    bool operator>(const Entry& other) const {
      return key != other.key ? key > other.key : index > other.index;
    }
  };
  void fix(std::size_t c, double rate, const std::vector<FairShareClass>& classes,
           std::vector<double>& rates);

  // Scratch kept between calls.
  std::vector<double> capacity_, load_;
  std::vector<std::uint8_t> fixed_;
  std::vector<std::size_t> start_, members_;  // classes per resource, in class order
  std::vector<std::size_t> slot_;             // filling members_: each resource's next slot
  std::vector<Entry> shares_, caps_;          // min-heaps, entries checked when they surface
  std::vector<std::size_t> round_, touched_;  // a round's capped classes; link sides it changed
};

}  // namespace dcp::sim
