// SPDX-License-Identifier: Apache-2.0
// Parametric sequence-length models; see length_distribution.h for the sources of each.
#include "dcp/data/length_distribution.h"

#include <array>
#include <cmath>
#include <string>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

namespace dcp {
namespace {

// The one place that maps kinds to names, descriptions and supports.
struct KindInfo {
  LengthDistributionKind kind;
  std::string_view name;
  std::string_view description;
  LengthSupport support;
};

constexpr std::array<KindInfo, 6> kKinds = {{
    {LengthDistributionKind::kLongDataCollections,
     "ldc",
     "Long-Data-Collections-like skewed, long-tailed lengths: log-normal(mu=ln 480, sigma=1.4) "
     "truncated to [16, 131072]",
     {16, 131072}},
    {LengthDistributionKind::kLongAlign,
     "longalign",
     "LongAlign-10k-like instruction data: log-uniform on [8192, 65536]",
     {8192, 65536}},
    {LengthDistributionKind::kProLong,
     "prolong",
     "ProLong-like pretraining data: log-normal(mu=7.68, sigma=0.74) truncated to [575, 340149]",
     {575, 340149}},
    {LengthDistributionKind::kMagiHistogram,
     "magi",
     "MagiAttention real-dataset histogram: 6 buckets from [1, 200] to [65537, 196608], "
     "log-uniform within a bucket",
     {1, 196608}},
    {LengthDistributionKind::kWlb,
     "wlb",
     "WLB-LLM 128K job: log-normal(mu=7.8, sigma=1.06) truncated to [1, 131072]",
     {1, 131072}},
    {LengthDistributionKind::kMegatronLogNormal,
     "megatron",
     "Megatron-Core dynamic CP example's mock data: log-normal(mean 1024 before the cut, "
     "sigma=1.5) truncated to [128, 8192]",
     {128, 8192}},
}};

const KindInfo& info(LengthDistributionKind kind) {
  for (const KindInfo& entry : kKinds) {
    if (entry.kind == kind) return entry;
  }
  throw Error("unknown LengthDistributionKind " + std::to_string(static_cast<int>(kind)));
}

// The MagiAttention histogram: bucket bounds (inclusive) and percent of documents.
struct Bucket {
  double lo;
  double hi;
  double weight;
};
constexpr std::array<Bucket, 6> kMagiBuckets = {{
    {1, 200, 18.6},
    {201, 1024, 52.8},
    {1025, 4096, 23.0},
    {4097, 16384, 4.3},
    {16385, 65536, 0.99},
    {65537, 196608, 0.31},
}};

// Rounds to the nearest integer (ties are measure-zero for continuous draws), at least 1.
TokenCount round_length(double x) {
  const TokenCount rounded = static_cast<TokenCount>(std::llround(x));
  return rounded < 1 ? 1 : rounded;
}

// exp(uniform(ln lo, ln hi)): equal probability mass per octave, the shape of a flat histogram on
// a log axis. The result lies in [lo, hi) before rounding, so in [lo, hi] after it.
double log_uniform(Rng& rng, double lo, double hi) {
  const double log_lo = std::log(lo);
  return std::exp(log_lo + rng.uniform01() * (std::log(hi) - log_lo));
}

// Log-normal rejected until its rounded value lies in [lo, hi]. Rejecting (rather than clamping)
// keeps the shape inside the bounds instead of piling mass onto them. Every model here accepts
// at least 96% of draws, so the loop ends after one or two iterations in practice.
TokenCount truncated_log_normal(Rng& rng, double mu, double sigma, TokenCount lo, TokenCount hi) {
  while (true) {
    const TokenCount length = round_length(std::exp(mu + sigma * rng.normal()));
    if (length >= lo && length <= hi) return length;
  }
}

TokenCount sample_magi(Rng& rng) {
  double total = 0;
  for (const Bucket& bucket : kMagiBuckets) total += bucket.weight;
  double u = rng.uniform01() * total;
  // Falls back to the last bucket only if rounding leaves u at the very top of the range.
  const Bucket* chosen = &kMagiBuckets.back();
  for (const Bucket& bucket : kMagiBuckets) {
    if (u < bucket.weight) {
      chosen = &bucket;
      break;
    }
    u -= bucket.weight;
  }
  return round_length(log_uniform(rng, chosen->lo, chosen->hi));
}

}  // namespace

std::string_view to_string(LengthDistributionKind kind) { return info(kind).name; }

LengthDistributionKind parse_length_distribution(std::string_view name) {
  for (const KindInfo& entry : kKinds) {
    if (entry.name == name) return entry.kind;
  }
  std::string known;
  for (const KindInfo& entry : kKinds) {
    if (!known.empty()) known += ", ";
    known += entry.name;
  }
  throw InvalidInput("unknown length distribution " + quoted(name) + " (known: " + known + ")");
}

const std::vector<LengthDistributionKind>& all_length_distributions() {
  static const std::vector<LengthDistributionKind> kinds = [] {
    std::vector<LengthDistributionKind> result;
    for (const KindInfo& entry : kKinds) result.push_back(entry.kind);
    return result;
  }();
  return kinds;
}

std::string_view describe(LengthDistributionKind kind) { return info(kind).description; }

LengthSupport support(LengthDistributionKind kind) { return info(kind).support; }

TokenCount sample_length(LengthDistributionKind kind, Rng& rng) {
  switch (kind) {
    case LengthDistributionKind::kLongDataCollections:
      return truncated_log_normal(rng, std::log(480.0), 1.4, 16, 131072);
    case LengthDistributionKind::kLongAlign:
      return round_length(log_uniform(rng, 8192, 65536));
    case LengthDistributionKind::kProLong:
      return truncated_log_normal(rng, 7.68, 0.74, 575, 340149);
    case LengthDistributionKind::kMagiHistogram:
      return sample_magi(rng);
    case LengthDistributionKind::kWlb:
      return truncated_log_normal(rng, 7.8, 1.06, 1, 131072);
    case LengthDistributionKind::kMegatronLogNormal:
      return truncated_log_normal(rng, std::log(1024.0) - 1.5 * 1.5 / 2, 1.5, 128, 8192);
  }
  throw Error("unknown LengthDistributionKind " + std::to_string(static_cast<int>(kind)));
}

std::vector<TokenCount> sample_lengths(LengthDistributionKind kind, std::size_t count,
                                       std::uint64_t seed) {
  Rng rng(seed);
  std::vector<TokenCount> lengths;
  lengths.reserve(count);
  for (std::size_t i = 0; i < count; ++i) lengths.push_back(sample_length(kind, rng));
  return lengths;
}

}  // namespace dcp
