// SPDX-License-Identifier: Apache-2.0
// Built-in masks against a per-element oracle, and spec parsing.
#include "dcp/model/mask_spec.h"

#include <gtest/gtest.h>

#include "dcp/core/error.h"
#include "dcp/core/rng.h"

#include "tests/testing/brute_force_mask.h"
#include "tests/testing/mask_checks.h"

namespace dcp {
namespace {

using testing::dense_count;
using testing::dense_mask;

class EveryMaskKind : public ::testing::TestWithParam<MaskKind> {};

TEST_P(EveryMaskKind, MatchesThePerElementDefinitionOnRandomSmallCases) {
  Rng rng(static_cast<std::uint64_t>(GetParam()) * 7919 + 1);
  for (int trial = 0; trial < 300; ++trial) {
    const TokenCount length = trial < 20 ? trial + 1 : rng.uniform_int(1, 300);
    const MaskSpec spec = testing::random_spec(GetParam(), length, rng);
    SCOPED_TRACE(to_string(spec) + " L=" + std::to_string(length));
    const SequenceMask mask = build_sequence_mask(spec, length);
    testing::expect_normal_form(mask);
    ASSERT_EQ(dense_mask(mask), dense_mask(spec, length));
  }
}

TEST_P(EveryMaskKind, CountsPairsOfRandomRectanglesExactly) {
  Rng rng(static_cast<std::uint64_t>(GetParam()) * 104729 + 3);
  for (int trial = 0; trial < 200; ++trial) {
    const TokenCount length = rng.uniform_int(1, 200);
    const MaskSpec spec = testing::random_spec(GetParam(), length, rng);
    const SequenceMask mask = build_sequence_mask(spec, length);
    const auto dense = dense_mask(spec, length);
    ASSERT_EQ(mask.total_pairs(), dense_count(dense, length, 0, length, 0, length));
    for (int rect = 0; rect < 20; ++rect) {
      TokenCount r0 = rng.uniform_int(0, length), r1 = rng.uniform_int(0, length);
      TokenCount c0 = rng.uniform_int(0, length), c1 = rng.uniform_int(0, length);
      if (r0 > r1) std::swap(r0, r1);
      if (c0 > c1) std::swap(c0, c1);
      ASSERT_EQ(mask.count_pairs(r0, r1, c0, c1), dense_count(dense, length, r0, r1, c0, c1))
          << to_string(spec) << " L=" << length << " rows [" << r0 << "," << r1 << ") cols [" << c0
          << "," << c1 << ")";
    }
  }
}

TEST_P(EveryMaskKind, KeepsFewSegmentsForLongSequences) {
  MaskSpec spec;
  spec.kind = GetParam();
  const SequenceMask mask = build_sequence_mask(spec, 131072);
  // Row-range arithmetic needs the mask to stay compact: a handful of segments, not one per row.
  // A chunked mask's rows start their keys at their chunk's start, so it needs one per chunk.
  const std::size_t most =
      spec.kind == MaskKind::kChunked ? static_cast<std::size_t>(131072 / spec.chunk) : 8u;
  EXPECT_LE(mask.segments().size(), most);
}

INSTANTIATE_TEST_SUITE_P(MaskSpec, EveryMaskKind, ::testing::ValuesIn(all_mask_kinds()),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(MaskSpec, CausalOfLengthLHasLTimesLPlusOneOverTwoPairs) {
  for (const TokenCount length : {TokenCount{1}, TokenCount{2}, TokenCount{7}, TokenCount{1000},
                                  TokenCount{131072}, TokenCount{1} << 31}) {
    EXPECT_EQ(build_sequence_mask(parse_mask_spec("causal"), length).total_pairs(),
              length * (length + 1) / 2);
  }
}

TEST(MaskSpec, ParsesDefaultsAndParameters) {
  const MaskSpec lambda = parse_mask_spec("lambda");
  EXPECT_EQ(lambda.kind, MaskKind::kLambda);
  EXPECT_EQ(lambda.sink, 64);
  EXPECT_EQ(lambda.window, 4096);
  const MaskSpec sq = parse_mask_spec(" shared_question: answers=8 , question=0.5 ");
  EXPECT_EQ(sq.answers, 8);
  EXPECT_DOUBLE_EQ(sq.question, 0.5);
  const MaskSpec cb = parse_mask_spec("causal_blockwise:block=512");
  EXPECT_EQ(cb.block, 512);
  EXPECT_EQ(cb.local, 2);
  EXPECT_EQ(parse_mask_spec("sliding_window:window=1").window, 1);
  const MaskSpec chunked = parse_mask_spec("chunked");
  EXPECT_EQ(chunked.kind, MaskKind::kChunked);
  EXPECT_EQ(chunked.chunk, 8192);
  EXPECT_EQ(parse_mask_spec(" chunked : chunk = 256 ").chunk, 256);
}

TEST(MaskSpec, ChunkedIsCausalInsideEachChunkWithOneSegmentPerChunk) {
  // L = q*C + r tokens: q full chunks of C(C+1)/2 pairs and a last one of r(r+1)/2.
  for (const TokenCount chunk : {TokenCount{1}, TokenCount{3}, TokenCount{256}, TokenCount{8192}}) {
    for (const TokenCount length :
         {TokenCount{1}, TokenCount{255}, TokenCount{256}, TokenCount{1000}, TokenCount{131073}}) {
      MaskSpec spec;
      spec.kind = MaskKind::kChunked;
      spec.chunk = chunk;
      const SequenceMask mask = build_sequence_mask(spec, length);
      const TokenCount full = length / chunk;
      const TokenCount rest = length % chunk;
      SCOPED_TRACE(to_string(spec) + " L=" + std::to_string(length));
      EXPECT_EQ(mask.total_pairs(), full * chunk * (chunk + 1) / 2 + rest * (rest + 1) / 2);
      // Chunks of one token are the diagonal, one segment [i, i+1); otherwise one per chunk.
      const TokenCount segments = chunk == 1 ? 1 : full + (rest > 0 ? 1 : 0);
      EXPECT_EQ(static_cast<TokenCount>(mask.segments().size()), segments);
      std::vector<Interval> row;
      mask.row_intervals(length - 1, row);
      ASSERT_EQ(row.size(), 1u);
      EXPECT_EQ(row[0], (Interval{(length - 1) / chunk * chunk, length}));
    }
  }
}

TEST(MaskSpec, ExtremeParametersGiveTheLimitMaskWithoutOverflow) {
  const TokenCount length = 10000;
  const PairCount causal = length * (length + 1) / 2;
  EXPECT_EQ(build_sequence_mask(
                parse_mask_spec("causal_blockwise:block=1000,local=9223372036854775807"), length)
                .total_pairs(),
            causal);
  EXPECT_EQ(
      build_sequence_mask(parse_mask_spec("causal_blockwise:block=9223372036854775807"), length)
          .total_pairs(),
      causal);
  EXPECT_EQ(
      build_sequence_mask(parse_mask_spec("sliding_window:window=9223372036854775807"), length)
          .total_pairs(),
      causal);
  EXPECT_EQ(build_sequence_mask(parse_mask_spec("lambda:sink=9223372036854775807,window=1"), length)
                .total_pairs(),
            causal);
  EXPECT_EQ(build_sequence_mask(
                parse_mask_spec("shared_question:question=0,answers=9223372036854775807"), length)
                .total_pairs(),
            causal);
  EXPECT_EQ(build_sequence_mask(parse_mask_spec("chunked:chunk=9223372036854775807"), length)
                .total_pairs(),
            causal);
}

TEST(MaskSpec, CanonicalStringParsesBackToTheSameSpec) {
  for (const char* text :
       {"causal", "full", "sliding_window:window=9", "lambda:sink=3,window=7",
        "shared_question:question=0.25,answers=3", "causal_blockwise:block=16,local=0",
        "shared_question:question=0.1234567,answers=4", "chunked:chunk=256", "chunked:chunk=1"}) {
    const MaskSpec spec = parse_mask_spec(text);
    EXPECT_EQ(to_string(spec), text);
    EXPECT_EQ(to_string(parse_mask_spec(to_string(spec))), text);
  }
}

void expect_rejected(const std::string& text, const std::string& fragment) {
  try {
    parse_mask_spec(text);
    ADD_FAILURE() << text << " was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message '" << e.what() << "' lacks '" << fragment << "'";
  }
}

TEST(MaskSpec, RejectsBadSpecsNamingTheOffendingPart) {
  expect_rejected("diagonal", "unknown mask kind 'diagonal'");
  expect_rejected("sliding_window:window=0", "window must be >= 1");
  expect_rejected("sliding_window:window=-3", "window must be >= 1");
  expect_rejected("sliding_window:window=abc", "'abc' is not an integer");
  expect_rejected("lambda:sink=-1", "sink must be >= 0");
  expect_rejected("shared_question:answers=0", "answers must be >= 1");
  expect_rejected("shared_question:question=1", "question must be in [0, 1)");
  expect_rejected("shared_question:question=-0.1", "question must be in [0, 1)");
  expect_rejected("shared_question:question=nan", "question");
  expect_rejected("causal_blockwise:block=0", "block must be >= 1");
  expect_rejected("causal_blockwise:local=-1", "local must be >= 0");
  expect_rejected("causal:window=3", "causal takes no parameter 'window'");
  expect_rejected("lambda:windw=3", "takes no parameter 'windw'");
  expect_rejected("lambda:window=3,window=4", "'window' is given twice");
  expect_rejected("lambda:window", "expected key=value");
  expect_rejected("lambda:", "expected key=value");
  expect_rejected("chunked:chunk=0", "chunk must be >= 1");
  expect_rejected("chunked:chunk=-256", "chunk must be >= 1");
  expect_rejected("chunked:chunk=1.5", "'1.5' is not an integer");
  expect_rejected("chunked:block=256", "chunked takes no parameter 'block' (it takes: chunk)");
  expect_rejected("chunked:chunk=2,chunk=3", "'chunk' is given twice");
  expect_rejected("chunk:chunk=8", "unknown mask kind 'chunk'");
}

}  // namespace
}  // namespace dcp
