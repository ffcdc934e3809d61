// SPDX-License-Identifier: Apache-2.0
// Built-in mask kinds, their spec strings ("name:key=value,...") and the masks they generate.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dcp/model/sequence_batch.h"
#include "dcp/model/sequence_mask.h"

namespace dcp {

// Every kind is defined on one sequence of length L, query row i (sequence-local):
//   causal            [0, i+1)
//   full              [0, L)
//   sliding_window    [max(0, i-W+1), i+1)                                   window=W
//   lambda            [0, min(S, i+1)) ∪ [max(0, i-W+1), i+1)                sink=S, window=W
//   shared_question   Q = floor(F*L) question tokens, causal among themselves; N answers of
//                     A = (L-Q) div N tokens (the last takes the rest); an answer token whose
//                     answer starts at s attends [0, Q) ∪ [s, i+1)                 question=F,
//                     answers=N
//   causal_blockwise  b = ceil(L/C) blocks of C tokens; first and last block causal; a middle-block
//                     token attends [0, C) ∪ [max(C, i-K*C), i+1)           block=C, local=K
//   chunked           [floor(i/C)*C, i+1): causal inside consecutive chunks of C tokens (Llama 4's
//                     chunked attention layers)                                    chunk=C
enum class MaskKind {
  kCausal,
  kFull,
  kSlidingWindow,
  kLambda,
  kSharedQuestion,
  kCausalBlockwise,
  kChunked
};

std::string_view to_string(MaskKind kind);
const std::vector<MaskKind>& all_mask_kinds();

struct MaskSpec {
  MaskKind kind = MaskKind::kCausal;
  TokenCount window = 4096;  // sliding_window, lambda
  TokenCount sink = 64;      // lambda
  double question = 0.2;     // shared_question: question fraction F in [0, 1)
  std::int64_t answers = 4;  // shared_question
  TokenCount block = 256;    // causal_blockwise
  std::int64_t local = 2;    // causal_blockwise
  TokenCount chunk = 8192;   // chunked (Llama 4's attention_chunk_size)

  // Number of question tokens of a shared_question sequence of length L: floor(F * L).
  TokenCount question_tokens(TokenCount length) const;
};

// Parses "name" or "name:key=value,key=value". Unset keys take the defaults above (for
// sliding_window the window defaults to 4096 too). Throws InvalidInput naming the spec and the
// offending name, key or value: unknown kind, unknown or repeated key, a key the kind does not
// take, a value that is not a number, or out of range (window <= 0, sink < 0, question outside [0,
// 1), answers <= 0, block <= 0, local < 0, chunk <= 0).
MaskSpec parse_mask_spec(std::string_view text);

// The canonical spec string with every parameter of the kind, e.g. "lambda:sink=64,window=4096".
std::string to_string(const MaskSpec& spec);

// The mask of one sequence of the given length (>= 1).
SequenceMask build_sequence_mask(const MaskSpec& spec, TokenCount length);

// One mask per sequence of the batch.
std::vector<SequenceMask> build_batch_mask(const MaskSpec& spec, const SequenceBatch& batch);

}  // namespace dcp
