// SPDX-License-Identifier: Apache-2.0
// Progressive filling with heaps of the link sides' shares and of the classes' caps.
#include "dcp/sim/fair_share.h"

#include <algorithm>
#include <functional>

namespace dcp::sim {

void FairShare::fix(std::size_t c, double rate, const std::vector<FairShareClass>& classes,
                    std::vector<double>& rates) {
  const FairShareClass& link = classes[c];
  fixed_[c] = 1;
  rates[c] = rate;
  for (const std::size_t r : {link.first, link.second}) {
    capacity_[r] = std::max(0.0, capacity_[r] - rate * link.transfers);
    load_[r] -= link.transfers;
    touched_.push_back(r);
  }
}

void FairShare::solve(const std::vector<double>& capacity,
                      const std::vector<FairShareClass>& classes, std::vector<double>& rates) {
  const std::size_t resources = capacity.size();
  const std::size_t count = classes.size();
  capacity_ = capacity;
  load_.assign(resources, 0.0);
  rates.assign(count, 0.0);
  fixed_.assign(count, 0);
  start_.assign(resources + 1, 0);
  for (const FairShareClass& link : classes) {
    load_[link.first] += link.transfers;
    load_[link.second] += link.transfers;
    ++start_[link.first + 1];
    ++start_[link.second + 1];
  }
  for (std::size_t r = 0; r < resources; ++r) start_[r + 1] += start_[r];
  members_.resize(2 * count);
  slot_.assign(start_.begin(), start_.end() - 1);  // each resource's next free member slot
  for (std::size_t c = 0; c < count; ++c) {
    members_[slot_[classes[c].first]++] = c;
    members_[slot_[classes[c].second]++] = c;
  }
  const auto later = std::greater<Entry>();
  shares_.clear();
  for (std::size_t r = 0; r < resources; ++r) {
    if (load_[r] > 0) shares_.push_back({capacity_[r] / load_[r], r});
  }
  std::make_heap(shares_.begin(), shares_.end(), later);
  caps_.clear();
  for (std::size_t c = 0; c < count; ++c) caps_.push_back({classes[c].cap, c});
  std::make_heap(caps_.begin(), caps_.end(), later);

  std::size_t open = count;
  while (open > 0) {
    // The smallest share of a link side still carrying transfers: an entry is current where it
    // equals what the side's capacity and load give now.
    while (load_[shares_.front().index] <= 0 ||
           capacity_[shares_.front().index] / load_[shares_.front().index] != shares_.front().key) {
      std::pop_heap(shares_.begin(), shares_.end(), later);
      shares_.pop_back();
    }
    const double share = shares_.front().key;
    const std::size_t bottleneck = shares_.front().index;
    // Classes capped below the share are fixed at their caps first, all of them at once (fixing
    // one only raises the others' shares), in class order as one pass over them would.
    round_.clear();
    while (!caps_.empty() && (fixed_[caps_.front().index] != 0 || caps_.front().key < share)) {
      if (fixed_[caps_.front().index] == 0) round_.push_back(caps_.front().index);
      std::pop_heap(caps_.begin(), caps_.end(), later);
      caps_.pop_back();
    }
    touched_.clear();
    if (!round_.empty()) {
      std::sort(round_.begin(), round_.end());
      for (const std::size_t c : round_) fix(c, classes[c].cap, classes, rates);
      open -= round_.size();
    } else {
      for (std::size_t m = start_[bottleneck]; m < start_[bottleneck + 1]; ++m) {
        const std::size_t c = members_[m];
        if (fixed_[c] != 0) continue;
        fix(c, share, classes, rates);
        --open;
      }
    }
    for (const std::size_t r : touched_) {
      if (load_[r] <= 0) continue;
      shares_.push_back({capacity_[r] / load_[r], r});
      std::push_heap(shares_.begin(), shares_.end(), later);
    }
  }
}

}  // namespace dcp::sim
