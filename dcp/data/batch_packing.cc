// SPDX-License-Identifier: Apache-2.0
// The DCP reference's batch packing, and batches sampled from a length distribution.
#include "dcp/data/batch_packing.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

namespace dcp {
namespace {

// Shortest round-trip text of a double; std::to_chars ignores the locale, unlike streams.
std::string format_double(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// splitmix64's output function: a bijection that scatters nearby inputs.
std::uint64_t finalize(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// An independent seed for each (seed, stream) pair. Scrambling the seed first means that two
// user seeds never share streams through simple arithmetic coincidences (seed + k == seed' + k').
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) {
  return finalize(finalize(seed) + 0x9E3779B97F4A7C15ULL * (stream + 1));
}

}  // namespace

void validate(const PackingOptions& options) {
  if (options.tokens_per_batch < 1) {
    throw InvalidInput("tokens_per_batch must be at least 1, got " +
                       std::to_string(options.tokens_per_batch));
  }
  // Written so that NaN fails too.
  if (!(options.min_fill > 0.0 && options.min_fill <= 1.0)) {
    throw InvalidInput("min_fill must be in (0, 1], got " + format_double(options.min_fill));
  }
  if (options.max_length < 0 || options.max_length > options.tokens_per_batch) {
    throw InvalidInput("max_length must be 0 (meaning tokens_per_batch) or in [1, " +
                       std::to_string(options.tokens_per_batch) + "], got " +
                       std::to_string(options.max_length));
  }
  if (!(options.scale > 0.0 && std::isfinite(options.scale))) {
    throw InvalidInput("scale must be positive and finite, got " + format_double(options.scale));
  }
}

TokenCount effective_max_length(const PackingOptions& options) {
  return options.max_length == 0 ? options.tokens_per_batch : options.max_length;
}

TokenCount min_batch_tokens(const PackingOptions& options) {
  return static_cast<TokenCount>(
      std::ceil(options.min_fill * static_cast<double>(options.tokens_per_batch)));
}

TokenCount scale_length(TokenCount length, double scale) {
  if (length < 1) {
    throw InvalidInput("length must be at least 1, got " + std::to_string(length));
  }
  if (!(scale > 0.0 && std::isfinite(scale))) {
    throw InvalidInput("scale must be positive and finite, got " + format_double(scale));
  }
  const double x = static_cast<double>(length) * scale;
  if (x >= 0x1p63) {
    throw InvalidInput("length " + std::to_string(length) + " times scale " + format_double(scale) +
                       " overflows a token count");
  }
  // Round half to even: the reference scales with Python's int(round(scale * length)).
  double rounded = std::round(x);
  if (x - std::trunc(x) == 0.5) rounded = 2.0 * std::round(x / 2.0);
  const TokenCount result = static_cast<TokenCount>(rounded);
  return result < 1 ? 1 : result;
}

std::vector<std::vector<std::size_t>> pack_batch_indices(std::span<const TokenCount> lengths,
                                                         const PackingOptions& options,
                                                         std::uint64_t seed, bool shuffle) {
  validate(options);
  std::vector<TokenCount> scaled;
  scaled.reserve(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) {
      throw InvalidInput("lengths[" + std::to_string(i) + "] = " + std::to_string(lengths[i]) +
                         " is not a positive sequence length");
    }
    scaled.push_back(scale_length(lengths[i], options.scale));
  }
  std::vector<std::size_t> order(lengths.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Shuffle before dropping, as the reference does, so the kept order depends on the whole input.
  if (shuffle) {
    Rng rng(seed);
    rng.shuffle(order);
  }

  const TokenCount max_length = effective_max_length(options);
  const TokenCount min_tokens = min_batch_tokens(options);
  std::vector<std::vector<std::size_t>> batches;
  std::vector<std::size_t> current;
  TokenCount current_sum = 0;
  const auto close_current = [&] {
    if (current_sum >= min_tokens) batches.push_back(std::move(current));
    current.clear();
    current_sum = 0;
  };
  for (const std::size_t index : order) {
    const TokenCount length = scaled[index];
    if (length > max_length) continue;
    // max_length <= tokens_per_batch, so a length always fits an empty batch.
    if (current_sum + length > options.tokens_per_batch) close_current();
    current.push_back(index);
    current_sum += length;
  }
  close_current();
  return batches;
}

std::vector<std::vector<TokenCount>> pack_batches(std::span<const TokenCount> lengths,
                                                  const PackingOptions& options,
                                                  std::uint64_t seed) {
  std::vector<std::vector<TokenCount>> batches;
  for (const std::vector<std::size_t>& indices : pack_batch_indices(lengths, options, seed)) {
    std::vector<TokenCount>& batch = batches.emplace_back();
    for (const std::size_t index : indices) {
      batch.push_back(scale_length(lengths[index], options.scale));
    }
  }
  return batches;
}

std::vector<std::vector<TokenCount>> sample_batches(LengthDistributionKind kind, std::size_t count,
                                                    const PackingOptions& options,
                                                    std::uint64_t seed) {
  validate(options);
  std::vector<std::vector<TokenCount>> batches;
  if (count == 0) return batches;

  // Pilot: pack a fixed-size sample to learn how many drawn lengths one kept batch consumes,
  // which folds in dropped lengths, partial fill and batches under min_fill. When the pilot
  // fills no batch (very large batches, or a hopeless configuration), fall back to the tokens
  // each drawn length contributes; when no pilot length fits at all there is nothing to scale
  // by, so rounds stay pilot-sized and a hopeless configuration fails fast.
  constexpr std::size_t kPilotSize = 4096;
  const std::vector<TokenCount> pilot = sample_lengths(kind, kPilotSize, mix_seed(seed, 0));
  const std::size_t pilot_batches = pack_batches(pilot, options, mix_seed(seed, 1)).size();
  double lengths_per_batch = 0;  // 0: unknown, use pilot-sized rounds.
  if (pilot_batches > 0) {
    lengths_per_batch = static_cast<double>(kPilotSize) / static_cast<double>(pilot_batches);
  } else {
    const TokenCount max_length = effective_max_length(options);
    double kept_tokens = 0;
    for (const TokenCount length : pilot) {
      const TokenCount scaled = scale_length(length, options.scale);
      if (scaled <= max_length) kept_tokens += static_cast<double>(scaled);
    }
    if (kept_tokens > 0) {
      lengths_per_batch = 2.0 * static_cast<double>(options.tokens_per_batch) *
                          static_cast<double>(kPilotSize) / kept_tokens;
    }
  }

  // A 25% margin makes a second round rare; a second round costs only time, never correctness.
  // The cap bounds memory (128 MiB of lengths); a batch needing more sequences than that cannot
  // be sampled and ends in the error below.
  constexpr double kMaxPool = 1 << 24;
  constexpr int kMaxEmptyRounds = 64;
  int empty_rounds = 0;
  for (std::uint64_t round = 0; batches.size() < count; ++round) {
    const double remaining = static_cast<double>(count - batches.size());
    const double pool =
        lengths_per_batch > 0
            ? std::min(kMaxPool, std::ceil(1.25 * remaining * lengths_per_batch) + 16)
            : static_cast<double>(kPilotSize);
    const std::vector<TokenCount> lengths =
        sample_lengths(kind, static_cast<std::size_t>(pool), mix_seed(seed, 2 * round + 2));
    std::vector<std::vector<TokenCount>> packed =
        pack_batches(lengths, options, mix_seed(seed, 2 * round + 3));
    if (packed.empty()) {
      if (++empty_rounds >= kMaxEmptyRounds) {
        const LengthSupport range = support(kind);
        throw InvalidInput("cannot fill any batch from length distribution '" +
                           std::string(to_string(kind)) + "' (lengths in [" +
                           std::to_string(range.min) + ", " + std::to_string(range.max) +
                           "]) at scale " + format_double(options.scale) +
                           " with tokens_per_batch " + std::to_string(options.tokens_per_batch) +
                           ", max_length " + std::to_string(effective_max_length(options)) +
                           " and min_fill " + format_double(options.min_fill) + ": " +
                           std::to_string(kMaxEmptyRounds) + " rounds in a row packed no batch");
      }
      continue;
    }
    empty_rounds = 0;
    for (auto& batch : packed) {
      if (batches.size() == count) break;
      batches.push_back(std::move(batch));
    }
  }
  return batches;
}

std::vector<std::vector<std::size_t>> deal_by_work(std::span<const double> works,
                                                   std::span<const TokenCount> lengths,
                                                   std::int32_t groups, TokenCount capacity) {
  if (groups < 1) throw InvalidInput("deal_by_work needs a group, got " + std::to_string(groups));
  if (works.size() != lengths.size()) {
    throw InvalidInput("deal_by_work needs a work per sample: " + std::to_string(works.size()) +
                       " for " + std::to_string(lengths.size()));
  }
  std::vector<std::size_t> order(lengths.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return works[a] > works[b]; });
  std::vector<std::vector<std::size_t>> shares(static_cast<std::size_t>(groups));
  std::vector<double> load(shares.size(), 0);
  std::vector<TokenCount> room(shares.size(), capacity);
  for (const std::size_t i : order) {
    std::size_t best = shares.size();
    for (std::size_t g = 0; g < shares.size(); ++g) {
      if (room[g] >= lengths[i] && (best == shares.size() || load[g] < load[best])) best = g;
    }
    if (best == shares.size()) continue;  // left out
    shares[best].push_back(i);
    load[best] += works[i];
    room[best] -= lengths[i];
  }
  for (std::vector<std::size_t>& share : shares) std::sort(share.begin(), share.end());
  return shares;
}

}  // namespace dcp
