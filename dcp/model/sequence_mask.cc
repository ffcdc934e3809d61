// SPDX-License-Identifier: Apache-2.0
// The attention mask of one sequence as row segments of affine key intervals.
#include "dcp/model/sequence_mask.h"

#include <algorithm>
#include <cassert>

namespace dcp {
namespace {

// Sum over i in [a, b) of max(0, c + k*i) for k in {-1, 0, 1}.
PairCount sum_positive_part(TokenCount c, TokenCount k, TokenCount a, TokenCount b) {
  if (a >= b) return 0;
  if (k == 0) return c > 0 ? (b - a) * c : 0;
  if (k > 0) {
    a = std::max(a, 1 - c);  // c + i > 0  <=>  i >= 1 - c
  } else {
    b = std::min(b, c);  // c - i > 0  <=>  i < c
  }
  if (a >= b) return 0;
  // Arithmetic series: (b - a) terms from f(a) to f(b - 1).
  const TokenCount first = c + k * a;
  const TokenCount last = c + k * (b - 1);
  // Halve before multiplying: when the term count is odd, first + last is even.
  const TokenCount terms = b - a;
  return terms % 2 == 0 ? terms / 2 * (first + last) : (first + last) / 2 * terms;
}

}  // namespace

PairCount count_interval_pairs(const AffineInterval& interval, TokenCount row_begin,
                               TokenCount row_end, TokenCount key_begin, TokenCount key_end) {
  // The overlap min(end(i), key_end) - max(begin(i), key_begin) is linear on each piece of the
  // row range cut where end(i) reaches key_end and where begin(i) passes key_begin.
  TokenCount cuts[4] = {row_begin, row_end, row_end, row_end};
  int n = 1;
  if (interval.end_slope != 0) cuts[n++] = std::clamp(key_end - interval.end0, row_begin, row_end);
  if (interval.begin_slope != 0) {
    cuts[n++] = std::clamp(key_begin - interval.begin0, row_begin, row_end);
  }
  cuts[n++] = row_end;
  std::sort(cuts, cuts + n);
  PairCount total = 0;
  for (int p = 0; p + 1 < n; ++p) {
    const TokenCount a = cuts[p];
    const TokenCount b = cuts[p + 1];
    if (a >= b) continue;
    // On [a, b): end side is either end(i) or key_end, begin side either begin(i) or key_begin.
    TokenCount c = 0;
    TokenCount k = 0;
    if (interval.end_at(a) < key_end) {
      c += interval.end0;
      k += interval.end_slope;
    } else {
      c += key_end;
    }
    if (interval.begin_at(a) >= key_begin) {
      c -= interval.begin0;
      k -= interval.begin_slope;
    } else {
      c -= key_begin;
    }
    total += sum_positive_part(c, k, a, b);
  }
  return total;
}

SequenceMask::SequenceMask(TokenCount length, std::vector<MaskSegment> segments,
                           std::vector<AffineInterval> intervals)
    : length_(length), segments_(std::move(segments)), intervals_(std::move(intervals)) {}

std::size_t SequenceMask::segment_of(TokenCount row) const {
  assert(row >= 0 && row < length_);
  const auto it =
      std::upper_bound(segments_.begin(), segments_.end(), row,
                       [](TokenCount r, const MaskSegment& s) { return r < s.row_end; });
  return static_cast<std::size_t>(it - segments_.begin());
}

void SequenceMask::row_intervals(TokenCount row, std::vector<Interval>& out) const {
  out.clear();
  for (const AffineInterval& interval : intervals(segments_[segment_of(row)])) {
    out.push_back(interval.at(row));
  }
}

PairCount SequenceMask::count_pairs(TokenCount row_begin, TokenCount row_end, TokenCount key_begin,
                                    TokenCount key_end) const {
  if (row_begin >= row_end || key_begin >= key_end) return 0;
  PairCount total = 0;
  for (std::size_t s = segment_of(row_begin); s < segments_.size(); ++s) {
    const MaskSegment& segment = segments_[s];
    if (segment.row_begin >= row_end) break;
    const TokenCount a = std::max(segment.row_begin, row_begin);
    const TokenCount b = std::min(segment.row_end, row_end);
    for (const AffineInterval& interval : intervals(segment)) {
      total += count_interval_pairs(interval, a, b, key_begin, key_end);
    }
  }
  return total;
}

}  // namespace dcp
