// SPDX-License-Identifier: Apache-2.0
// A seeded random generator whose streams are identical on every platform and standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace dcp {

// xoshiro256** seeded through splitmix64. The std:: distributions are not used anywhere in dcp:
// their output differs between standard libraries, and plans must be reproducible bit for bit.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    std::uint64_t x = seed;
    for (auto& word : state_) word = splitmix64(x);
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 random bits.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [lo, hi] (inclusive); requires lo <= hi. Unbiased (Lemire's rejection).
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
    const std::uint64_t range = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
    if (range == UINT64_MAX) return static_cast<std::int64_t>(next_u64());
    const std::uint64_t n = range + 1;
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    std::uint64_t x = next_u64();
    while (x >= limit) x = next_u64();
    return lo + static_cast<std::int64_t>(x % n);
  }

  // Fisher-Yates shuffle driven by this generator (std::shuffle's sequence is not portable).
  template <typename T>
  void shuffle(std::vector<T>& items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(uniform_int(0, static_cast<std::int64_t>(i - 1)));
      std::swap(items[i - 1], items[j]);
    }
  }

  // Standard normal by Box-Muller (one value per call; the pair's second value is dropped so that
  // the stream position never depends on call history).
  double normal() {
    double u1 = uniform01();
    while (u1 <= 0.0) u1 = uniform01();
    const double u2 = uniform01();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  std::uint64_t state_[4];
};

}  // namespace dcp
