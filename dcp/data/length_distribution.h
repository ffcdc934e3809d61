// SPDX-License-Identifier: Apache-2.0
// Generators of realistic sequence lengths for long-context training, one per modelled dataset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "dcp/core/ids.h"
#include "dcp/core/rng.h"

namespace dcp {

// The modelled length distributions. None of them ships a dataset: each is a small parametric
// model whose parameters come from published statistics, so that experiments need no downloads
// and every run is reproducible from a seed. Lengths are unscaled; batch_packing.h scales them.
//
// kLongDataCollections ("ldc"): a synthetic stand-in for Long-Data-Collections
//   (togethercomputer/Long-Data-Collections), NOT the dataset, whose length statistics are not
//   published. The DCP paper calls it "skewed, long-tailed ... similar to ... the Pile", with more
//   short sequences and a shorter average than LongAlign (section 7), and its measured speed-ups
//   order the length scales as LDC x2 ~ LongAlign x0.5 and LDC x4 ~ LongAlign x1. Model: one
//   heavy-tailed log-normal(mu = ln 480, sigma = 1.4) truncated to [16, 131072] (0.75% of the mass
//   is cut below 16). Its token-weighted mean length, the length the average token sits in, is
//   ~8.1K, a quarter of LongAlign's 36.9K, which matches that ordering. Median ~490, mean ~1.3K;
//   0.6% of documents are over 16K, and they hold 13% of the tokens and 56% of the causal work.
// kLongAlign ("longalign"): LongAlign-10k-like (THUDM/LongAlign-10k, whose dataset card gives
//   "8k-64k" tokens). Model: log-uniform on [8192, 65536], i.e. exp(uniform(ln 8192, ln 65536)).
// kProLong ("prolong"): ProLong-like (princeton-nlp ProLong data). Model: log-normal(mu = 7.68,
//   sigma = 0.74) truncated to [575, 340149] by rejection; the bounds are the sample's extremes.
//   The sample's stated median is 1913 and mean 3052; this truncated model has median ~2240 and
//   mean ~2940 (the lower cut raises the median), so it is a little more concentrated than the
//   sample.
// kMagiHistogram ("magi"): the document-length histogram of the real dataset in MagiAttention's
//   benchmarks (SandAI-org/MagiAttention), percent of documents per bucket: [1, 200] 18.6%,
//   [201, 1024] 52.8%, [1025, 4096] 23.0%, [4097, 16384] 4.3%, [16385, 65536] 0.99%,
//   [65537, 196608] 0.31%. Model: pick a bucket by those weights (normalised), then log-uniform
//   within it. Median ~530; 71.4% of documents are at most 1024 tokens.
// kWlb ("wlb"): the length distribution of WLB-LLM's 128K-context training job (WLB-LLM, OSDI'25),
//   reconstructed as log-normal(mu = 7.8, sigma = 1.06) truncated to [1, 131072] (median ~2440).
// kMegatronLogNormal ("megatron"): the mock lengths of Megatron-Core's dynamic context-parallel
//   example (examples/dynamic_context_parallel: log-normal, mean 1024, sigma 1.5, lengths 128 to
//   8192). Model: log-normal(mu = ln 1024 - sigma^2 / 2, sigma = 1.5), whose mean before the cut
//   is 1024, truncated to [128, 8192] (the example names the four numbers, not how it cuts; the
//   cut removes 26% of the mass below and 1.6% above; the kept median is ~530, the mean ~1020).
//
// Every sampled length is rounded to the nearest integer and is at least 1.
enum class LengthDistributionKind {
  kLongDataCollections,
  kLongAlign,
  kProLong,
  kMagiHistogram,
  kWlb,
  kMegatronLogNormal
};

// The name used on command lines and in result files: "ldc", "longalign", "prolong", "magi", "wlb",
// "megatron".
std::string_view to_string(LengthDistributionKind kind);

// The inverse of to_string. Throws InvalidInput naming the text and the known names.
LengthDistributionKind parse_length_distribution(std::string_view name);

// Every kind, in declaration order.
const std::vector<LengthDistributionKind>& all_length_distributions();

// One line: what the distribution models and its parameters.
std::string_view describe(LengthDistributionKind kind);

// The closed range [min, max] every sampled (unscaled) length lies in.
struct LengthSupport {
  TokenCount min = 1;
  TokenCount max = 1;
};
LengthSupport support(LengthDistributionKind kind);

// Draws one length (>= 1, unscaled). Deterministic given the generator's state; consumes a
// kind-dependent number of draws from `rng`.
TokenCount sample_length(LengthDistributionKind kind, Rng& rng);

// `count` lengths drawn in order from Rng(seed); equal to calling sample_length `count` times.
std::vector<TokenCount> sample_lengths(LengthDistributionKind kind, std::size_t count,
                                       std::uint64_t seed);

}  // namespace dcp
