// SPDX-License-Identifier: Apache-2.0
// Test oracle: masks as dense boolean matrices, built element by element from the definitions.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "dcp/model/mask_spec.h"
#include "dcp/model/sequence_mask.h"

namespace dcp::testing {

// allowed[i * L + j]: query row i may attend key j. Written straight from the masks' definitions
// (docs/block_model.md), independent of MaskBuilder and of mask_spec.cc's row-range
// decomposition.
inline std::vector<char> dense_mask(const MaskSpec& spec, TokenCount L) {
  std::vector<char> allowed(static_cast<std::size_t>(L * L), 0);
  const auto set_range = [&](TokenCount i, TokenCount s, TokenCount e) {
    for (TokenCount j = std::max<TokenCount>(s, 0); j < std::min(e, L); ++j) {
      allowed[static_cast<std::size_t>(i * L + j)] = 1;
    }
  };
  for (TokenCount i = 0; i < L; ++i) {
    switch (spec.kind) {
      case MaskKind::kCausal:
        set_range(i, 0, i + 1);
        break;
      case MaskKind::kFull:
        set_range(i, 0, L);
        break;
      case MaskKind::kSlidingWindow:
        set_range(i, std::max<TokenCount>(0, i - spec.window + 1), i + 1);
        break;
      case MaskKind::kLambda:
        set_range(i, 0, std::min(spec.sink, i + 1));
        set_range(i, std::max<TokenCount>(0, i - spec.window + 1), i + 1);
        break;
      case MaskKind::kSharedQuestion: {
        const auto q = static_cast<TokenCount>(std::floor(spec.question * static_cast<double>(L)));
        const TokenCount a = (L - q) / spec.answers;
        if (i < q) {
          set_range(i, 0, i + 1);
        } else {
          // Find the answer holding token i: answer k < N-1 covers [q + k*a, q + (k+1)*a).
          TokenCount start = q + (spec.answers - 1) * a;  // the last answer's start
          for (TokenCount k = 0; k + 1 < spec.answers; ++k) {
            if (i >= q + k * a && i < q + (k + 1) * a) {
              start = q + k * a;
              break;
            }
          }
          set_range(i, 0, q);
          set_range(i, start, i + 1);
        }
        break;
      }
      case MaskKind::kCausalBlockwise: {
        const TokenCount c = spec.block;
        const TokenCount b = (L + c - 1) / c;
        const TokenCount block = i / c;
        if (block == 0 || block == b - 1) {
          set_range(i, 0, i + 1);
        } else {
          set_range(i, 0, c);
          set_range(i, std::max(c, i - spec.local * c), i + 1);
        }
        break;
      }
      case MaskKind::kChunked:
        set_range(i, i / spec.chunk * spec.chunk, i + 1);
        break;
    }
  }
  return allowed;
}

// The same from a SequenceMask, element by element through row_intervals().
inline std::vector<char> dense_mask(const SequenceMask& mask) {
  const TokenCount L = mask.length();
  std::vector<char> allowed(static_cast<std::size_t>(L * L), 0);
  std::vector<Interval> row;
  for (TokenCount i = 0; i < L; ++i) {
    mask.row_intervals(i, row);
    for (const Interval& interval : row) {
      for (TokenCount j = interval.begin; j < interval.end; ++j) {
        allowed[static_cast<std::size_t>(i * L + j)] = 1;
      }
    }
  }
  return allowed;
}

inline PairCount dense_count(const std::vector<char>& allowed, TokenCount L, TokenCount r0,
                             TokenCount r1, TokenCount c0, TokenCount c1) {
  PairCount count = 0;
  for (TokenCount i = r0; i < r1; ++i) {
    for (TokenCount j = c0; j < c1; ++j) count += allowed[static_cast<std::size_t>(i * L + j)];
  }
  return count;
}

}  // namespace dcp::testing
