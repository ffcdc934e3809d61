// SPDX-License-Identifier: Apache-2.0
// The network's max-min fair rates: a case counted by hand, the max-min property on random
// networks, the same bits as one pass over every class and resource per round, and components
// solved apart as together (what the simulator's network relies on to solve only what changed).
#include "dcp/sim/fair_share.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace dcp::sim {
namespace {

// Progressive filling the plain way: every round scans every resource for the smallest share and
// every open class for a cap below it.
std::vector<double> filled_round_by_round(std::vector<double> capacity,
                                          const std::vector<FairShareClass>& classes) {
  std::vector<double> load(capacity.size(), 0.0), rates(classes.size(), 0.0);
  std::vector<std::size_t> open;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    load[classes[c].first] += classes[c].transfers;
    load[classes[c].second] += classes[c].transfers;
    open.push_back(c);
  }
  while (!open.empty()) {
    double share = std::numeric_limits<double>::infinity();
    std::size_t bottleneck = 0;
    for (std::size_t r = 0; r < capacity.size(); ++r) {
      if (load[r] > 0 && capacity[r] / load[r] < share) {
        share = capacity[r] / load[r];
        bottleneck = r;
      }
    }
    const bool capped = std::any_of(open.begin(), open.end(),
                                    [&](std::size_t c) { return classes[c].cap < share; });
    std::erase_if(open, [&](std::size_t c) {
      const FairShareClass& link = classes[c];
      double rate = share;
      if (capped) {
        if (!(link.cap < share)) return false;
        rate = link.cap;
      } else if (link.first != bottleneck && link.second != bottleneck) {
        return false;
      }
      rates[c] = rate;
      for (const std::size_t r : {link.first, link.second}) {
        capacity[r] = std::max(0.0, capacity[r] - rate * link.transfers);
        load[r] -= link.transfers;
      }
      return true;
    });
  }
  return rates;
}

struct Network {
  std::vector<double> capacity;
  std::vector<FairShareClass> classes;
};

// `resources` link sides of capacities 1..4 (some equal, for ties) and `count` classes between
// them; caps bind on about a third of the classes where `capped`.
Network random_network(std::mt19937_64& rng, std::size_t resources, std::size_t count,
                       bool capped) {
  Network network;
  std::uniform_int_distribution<int> capacity(1, 4), side(0, static_cast<int>(resources) - 1),
      transfers(1, 4), third(0, 2);
  std::uniform_real_distribution<double> cap(0.05, 1.5);
  for (std::size_t r = 0; r < resources; ++r) network.capacity.push_back(capacity(rng) * 1e9);
  for (std::size_t c = 0; c < count; ++c) {
    FairShareClass link;
    link.first = static_cast<std::size_t>(side(rng));
    do {
      link.second = static_cast<std::size_t>(side(rng));
    } while (link.second == link.first);
    link.transfers = transfers(rng);
    link.cap = capped && third(rng) == 0 ? cap(rng) * 1e9 : 1e30;
    network.classes.push_back(link);
  }
  return network;
}

std::vector<double> solved(const Network& network) {
  FairShare solver;
  std::vector<double> rates;
  solver.solve(network.capacity, network.classes, rates);
  return rates;
}

TEST(FairShare, SharesALinkSideEvenlyAndGivesTheRestToWhoCanUseIt) {
  // Side 2 (4 GB/s) carries a and b; side 0 carries a and c; side 1 carries b and c.
  const std::vector<double> capacity = {10e9, 10e9, 4e9};
  std::vector<FairShareClass> classes = {{0, 2, 1, 1e30}, {1, 2, 1, 1e30}, {0, 1, 1, 1e30}};
  std::vector<double> rates;
  FairShare solver;
  solver.solve(capacity, classes, rates);
  EXPECT_EQ(rates, (std::vector<double>{2e9, 2e9, 8e9}));
  // Capped at 1 GB/s, a leaves b the rest of side 2, and c what sides 0 and 1 have left.
  classes[0].cap = 1e9;
  solver.solve(capacity, classes, rates);
  EXPECT_EQ(rates, (std::vector<double>{1e9, 3e9, 7e9}));
  // Two transfers of one class share its side with one of another, per transfer.
  classes = {{0, 1, 2, 1e30}, {0, 2, 1, 1e30}};
  solver.solve({6e9, 10e9, 10e9}, classes, rates);
  EXPECT_EQ(rates, (std::vector<double>{2e9, 2e9}));
}

TEST(FairShare, RatesAreMaxMinFairOnRandomNetworks) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const Network network = random_network(rng, 12, 30, trial % 2 == 1);
    const std::vector<double> rates = solved(network);
    std::vector<double> used(network.capacity.size(), 0.0);
    for (std::size_t c = 0; c < rates.size(); ++c) {
      const FairShareClass& link = network.classes[c];
      EXPECT_GE(rates[c], 0.0);
      EXPECT_LE(rates[c], link.cap * (1 + 1e-12));
      used[link.first] += rates[c] * link.transfers;
      used[link.second] += rates[c] * link.transfers;
    }
    for (std::size_t r = 0; r < used.size(); ++r) {
      EXPECT_LE(used[r], network.capacity[r] * (1 + 1e-12)) << "resource " << r;
    }
    // Max-min: a class below its cap has a full side on which no class runs faster, so it could
    // only gain by taking from one no faster than itself.
    for (std::size_t c = 0; c < rates.size(); ++c) {
      const FairShareClass& link = network.classes[c];
      if (rates[c] >= link.cap * (1 - 1e-12)) continue;
      bool bottlenecked = false;
      for (const std::size_t r : {link.first, link.second}) {
        if (used[r] < network.capacity[r] * (1 - 1e-9)) continue;
        bool fastest = true;
        for (std::size_t o = 0; o < rates.size(); ++o) {
          const FairShareClass& other = network.classes[o];
          if ((other.first == r || other.second == r) && rates[o] > rates[c] * (1 + 1e-9)) {
            fastest = false;
          }
        }
        bottlenecked = bottlenecked || fastest;
      }
      EXPECT_TRUE(bottlenecked) << "trial " << trial << " class " << c;
    }
  }
}

TEST(FairShare, RoundsAsOnePassOverEveryClassAndResourceToTheBit) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const Network network =
        random_network(rng, 4 + static_cast<std::size_t>(trial % 20),
                       1 + static_cast<std::size_t>(trial % 60), trial % 3 == 0);
    EXPECT_EQ(solved(network), filled_round_by_round(network.capacity, network.classes))
        << "trial " << trial;
  }
}

TEST(FairShare, SolvesComponentsApartAsTogether) {
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 100; ++trial) {
    const bool capped = trial % 2 == 1;
    const Network a = random_network(rng, 8, 20, capped);
    const Network b = random_network(rng, 6, 15, capped);
    // b's resources after a's: two components of one network.
    Network both = a;
    both.capacity.insert(both.capacity.end(), b.capacity.begin(), b.capacity.end());
    for (FairShareClass link : b.classes) {
      link.first += a.capacity.size();
      link.second += a.capacity.size();
      both.classes.push_back(link);
    }
    std::vector<double> apart = solved(a);
    const std::vector<double> rates_b = solved(b);
    apart.insert(apart.end(), rates_b.begin(), rates_b.end());
    const std::vector<double> together = solved(both);
    ASSERT_EQ(apart.size(), together.size());
    for (std::size_t c = 0; c < apart.size(); ++c) {
      // Without caps the rounds of one component never touch the other's, to the bit; a cap
      // fixed in a round the other component's share set may round differently.
      if (capped) {
        EXPECT_NEAR(apart[c], together[c], 1e-12 * together[c]) << "trial " << trial;
      } else {
        EXPECT_EQ(apart[c], together[c]) << "trial " << trial << " class " << c;
      }
    }
  }
}

}  // namespace
}  // namespace dcp::sim
