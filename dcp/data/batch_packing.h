// SPDX-License-Identifier: Apache-2.0
// The DCP reference's packing of variable-length sequences into fixed-token training batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/data/length_distribution.h"

namespace dcp {

struct PackingOptions {
  // Token budget of one batch; a batch's lengths sum to at most this.
  TokenCount tokens_per_batch = 131072;
  // A batch is kept only if it holds at least ceil(min_fill * tokens_per_batch) tokens, so that
  // experiments compare batches of nearly equal work. In (0, 1].
  double min_fill = 0.75;
  // Longer (scaled) sequences are dropped. 0 means tokens_per_batch.
  TokenCount max_length = 0;
  // Every length is multiplied by this before packing (the DCP paper uses 0.5, 1, 2 and 4 to
  // shift the mean length). Positive and finite.
  double scale = 1.0;
};

// Throws InvalidInput naming the field and its value: tokens_per_batch >= 1; 0 < min_fill <= 1;
// 0 <= max_length <= tokens_per_batch; scale positive and finite.
void validate(const PackingOptions& options);

// The effective max_length: max_length, or tokens_per_batch when it is 0.
TokenCount effective_max_length(const PackingOptions& options);

// The fewest tokens a kept batch holds: ceil(min_fill * tokens_per_batch) computed in double,
// which is exactly the reference's test `batch_sum >= tokens_per_batch * min_fill`.
TokenCount min_batch_tokens(const PackingOptions& options);

// round(length * scale), at least 1. Ties round to even, as Python's round() does in the
// reference's scaling script, so that odd lengths at scale 0.5 match it. Throws InvalidInput if
// length < 1, scale is not positive and finite, or the result overflows.
TokenCount scale_length(TokenCount length, double scale);

// The DCP reference's packing (benchmark/preprocessing/*/get_*_batches.py), with dcp::Rng in
// place of numpy's generator:
//   1. scale every length (scale_length);
//   2. shuffle with Fisher-Yates driven by Rng(seed) (i from n-1 down to 1, swap with
//      uniform_int(0, i));
//   3. drop lengths > effective_max_length;
//   4. in shuffled order, append to the current batch; when the next length would overflow
//      tokens_per_batch, close the current batch and start the next one with that length;
//   5. keep a closed batch only if it holds at least min_batch_tokens tokens. The final,
//      unfinished batch is kept under the same rule (the reference always drops it).
// Each batch lists its lengths in shuffled order. Throws InvalidInput for invalid options or a
// length < 1 (naming its index and value).
std::vector<std::vector<TokenCount>> pack_batches(std::span<const TokenCount> lengths,
                                                  const PackingOptions& options,
                                                  std::uint64_t seed);

// The same packing as indices into `lengths` (each batch in packed order), so that a data loader
// packs its samples themselves. shuffle = false packs in the given order.
std::vector<std::vector<std::size_t>> pack_batch_indices(std::span<const TokenCount> lengths,
                                                         const PackingOptions& options,
                                                         std::uint64_t seed, bool shuffle = true);

// Exactly `count` packed batches of lengths drawn from `kind`. Lengths are drawn in rounds; round
// r draws a pool from a seed mixed from (seed, r), packs it with pack_batches, and appends its
// batches until `count` are collected (the surplus of the last round is discarded). The pool is
// sized from a pilot estimate of the tokens each drawn length contributes, so one round usually
// suffices. Throws InvalidInput if the options are invalid or if 64 consecutive rounds produce
// no batch (e.g. every scaled length exceeds max_length).
std::vector<std::vector<TokenCount>> sample_batches(LengthDistributionKind kind, std::size_t count,
                                                    const PackingOptions& options,
                                                    std::uint64_t seed);

// Samples dealt to `groups` groups, largest work first (ties: the lower index), each to the group
// with the least work so far that has room for its tokens within `capacity` (ties: the lower
// group); a sample no group has room for is left out. Each group lists its samples in index order.
// What spreads a batch's samples over data-parallel groups or nodes by their cost rather than
// their tokens. Throws InvalidInput for fewer than one group or a work per sample missing.
std::vector<std::vector<std::size_t>> deal_by_work(std::span<const double> works,
                                                   std::span<const TokenCount> lengths,
                                                   std::int32_t groups, TokenCount capacity);

}  // namespace dcp
