// SPDX-License-Identifier: Apache-2.0
// Megatron-Core's DP-balanced and dynamic CP schedulers, as its dynamic CP example runs them.
#include "apps/suites/megatron_schedulers.h"

#include <algorithm>
#include <string>

#include "dcp/core/error.h"

namespace dcp::suites {

TokenCount padded(TokenCount length, TokenCount multiple) {
  return multiple <= 1 ? length : (length + multiple - 1) / multiple * multiple;
}

std::vector<std::vector<std::vector<std::size_t>>> dp_balanced_micro_batches(
    const std::vector<TokenCount>& lengths, std::int32_t cp, std::int32_t dp,
    TokenCount device_tokens) {
  if (cp < 1 || dp < 1) {
    throw InvalidInput("dp_balanced needs cp and dp of at least 1, got " + std::to_string(cp) +
                       " and " + std::to_string(dp));
  }
  const TokenCount bin_tokens = static_cast<TokenCount>(cp) * device_tokens;
  std::vector<std::vector<std::size_t>> bins;
  TokenCount held = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (bins.empty() || held + lengths[i] > bin_tokens) {
      bins.emplace_back();
      held = 0;
    }
    bins.back().push_back(i);
    held += lengths[i];
  }
  // Single samples split off the last bins that hold more than one, until the bins deal evenly.
  std::size_t from = bins.size();
  while (bins.size() % static_cast<std::size_t>(dp) != 0) {
    while (from > 0 && bins[from - 1].size() < 2) --from;
    if (from == 0) {
      throw InvalidInput("dp_balanced: " + std::to_string(lengths.size()) +
                         " samples cannot fill a multiple of " + std::to_string(dp) + " bins");
    }
    const std::size_t last = bins[from - 1].back();
    bins[from - 1].pop_back();
    bins.push_back({last});
  }
  std::vector<std::vector<std::vector<std::size_t>>> micro_batches(bins.size() /
                                                                   static_cast<std::size_t>(dp));
  for (std::size_t m = 0; m < micro_batches.size(); ++m) {
    for (std::size_t j = 0; j < static_cast<std::size_t>(dp); ++j) {
      micro_batches[m].push_back(bins[m * static_cast<std::size_t>(dp) + j]);
    }
  }
  return micro_batches;
}

std::vector<std::vector<DynamicGroup>> packing_aware_rounds(const std::vector<TokenCount>& lengths,
                                                            std::int32_t devices,
                                                            TokenCount device_tokens) {
  if (devices < 1 || device_tokens < 1) {
    throw InvalidInput("packing_aware_rounds needs devices and a device bound, got " +
                       std::to_string(devices) + " and " + std::to_string(device_tokens));
  }
  std::vector<std::int32_t> sizes;
  for (std::int32_t size = 1; size <= devices; size *= 2) {
    if (devices % size == 0) sizes.push_back(size);
  }
  if (sizes.back() != devices) sizes.push_back(devices);
  const auto smallest_holding = [&](std::size_t i) {
    const TokenCount needed = (lengths[i] + device_tokens - 1) / device_tokens;
    for (const std::int32_t size : sizes) {
      if (size >= needed) return size;
    }
    throw InvalidInput("sample " + std::to_string(i) + " of " + std::to_string(lengths[i]) +
                       " tokens needs more than the pool's " + std::to_string(devices) +
                       " devices at " + std::to_string(device_tokens) + " tokens each");
  };
  const auto work = [&](std::size_t i, std::int32_t size) {
    return static_cast<double>(lengths[i]) * static_cast<double>(lengths[i]) / size;
  };
  struct Open {
    DynamicGroup group;
    double tokens_per_device = 0;
    double work = 0;  // per device
  };
  std::vector<std::size_t> pending(lengths.size());
  for (std::size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  std::stable_sort(pending.begin(), pending.end(),
                   [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<DynamicGroup>> rounds;
  while (!pending.empty()) {
    const double cap =
        static_cast<double>(lengths[pending.front()]) * static_cast<double>(device_tokens) * 1.05;
    std::vector<Open> open;
    std::int32_t free_devices = devices;
    double busiest = 0;
    std::vector<std::size_t> left;
    for (const std::size_t i : pending) {
      // The lowest busiest rank: joining an open group (its index) or opening one (npos).
      double best = 0;
      bool found = false;
      std::size_t best_group = 0;
      std::int32_t best_size = 0;
      const auto consider = [&](double projected, std::size_t group, std::int32_t size) {
        if (projected <= cap && (!found || projected < best)) {
          best = projected;
          found = true;
          best_group = group;
          best_size = size;
        }
      };
      // The round's first (longest) sample opens a group of the smallest size that holds it.
      const bool first = i == pending.front();
      for (const std::int32_t size : sizes) {
        if (size < smallest_holding(i) || (first && size != smallest_holding(i))) continue;
        const double added = work(i, size);
        for (std::size_t g = 0; g < open.size(); ++g) {
          if (open[g].group.devices != size ||
              open[g].tokens_per_device + static_cast<double>(lengths[i]) / size >
                  static_cast<double>(device_tokens)) {
            continue;
          }
          consider(std::max(busiest, open[g].work + added), g, size);
        }
        if (free_devices >= size) consider(std::max(busiest, added), open.size(), size);
      }
      if (!found) {
        left.push_back(i);
        continue;
      }
      if (best_group == open.size()) {
        open.push_back({{best_size, {}}, 0, 0});
        free_devices -= best_size;
      }
      Open& chosen = open[best_group];
      chosen.group.samples.push_back(i);
      chosen.tokens_per_device += static_cast<double>(lengths[i]) / best_size;
      chosen.work += work(i, best_size);
      busiest = std::max(busiest, chosen.work);
    }
    // Free devices double the first group of the smallest size while they last.
    while (free_devices > 0 && !open.empty()) {
      std::int32_t smallest = devices + 1;
      for (const Open& o : open) smallest = std::min(smallest, o.group.devices);
      const auto at = std::find(sizes.begin(), sizes.end(), smallest);
      if (at == sizes.end() || at + 1 == sizes.end() || *(at + 1) - smallest > free_devices) break;
      for (Open& o : open) {
        if (o.group.devices != smallest) continue;
        o.group.devices = *(at + 1);
        free_devices -= *(at + 1) - smallest;
        break;
      }
    }
    std::vector<DynamicGroup> round;
    for (Open& o : open) {
      std::sort(o.group.samples.begin(), o.group.samples.end());
      round.push_back(std::move(o.group));
    }
    rounds.push_back(std::move(round));
    pending = std::move(left);
  }
  return rounds;
}

}  // namespace dcp::suites
