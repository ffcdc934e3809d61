// SPDX-License-Identifier: Apache-2.0
// Built-in mask kinds, their spec strings and the masks they generate.
#include "dcp/model/mask_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/model/mask_builder.h"

namespace dcp {
namespace {

struct KindInfo {
  MaskKind kind;
  std::string_view name;
  std::vector<std::string_view> keys;
};

const std::vector<KindInfo>& kind_table() {
  static const std::vector<KindInfo> table = {
      {MaskKind::kCausal, "causal", {}},
      {MaskKind::kFull, "full", {}},
      {MaskKind::kSlidingWindow, "sliding_window", {"window"}},
      {MaskKind::kLambda, "lambda", {"sink", "window"}},
      {MaskKind::kSharedQuestion, "shared_question", {"question", "answers"}},
      {MaskKind::kCausalBlockwise, "causal_blockwise", {"block", "local"}},
      {MaskKind::kChunked, "chunked", {"chunk"}},
  };
  return table;
}

const KindInfo& info_of(MaskKind kind) {
  for (const KindInfo& info : kind_table()) {
    if (info.kind == kind) return info;
  }
  return kind_table().front();
}

std::string known_kinds() {
  std::string names;
  for (const KindInfo& info : kind_table()) {
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

// Affine forms used below (row i is the variable).
constexpr AffineInterval prefix_through_row() { return {0, 1, 0, 1}; }  // [0, i+1)
constexpr AffineInterval constant(TokenCount b, TokenCount e) { return {b, e, 0, 0}; }
constexpr AffineInterval trailing_window(TokenCount w) { return {1 - w, 1, 1, 1}; }  // [i-w+1, i+1)
constexpr AffineInterval from_through_row(TokenCount b) { return {b, 1, 0, 1}; }     // [b, i+1)

// Adds rows [row_begin, row_end) cut at the sequence end; the formulas below place row ranges by
// parameters (window, sink, block) that may exceed L. Empty ranges are skipped.
void add_clipped(MaskBuilder& builder, TokenCount row_begin, TokenCount row_end,
                 std::initializer_list<AffineInterval> raw, TokenCount length) {
  row_end = std::min(row_end, length);
  if (row_begin < row_end) {
    builder.add(row_begin, row_end, std::span<const AffineInterval>(raw.begin(), raw.size()));
  }
}

}  // namespace

std::string_view to_string(MaskKind kind) { return info_of(kind).name; }

const std::vector<MaskKind>& all_mask_kinds() {
  static const std::vector<MaskKind> kinds = [] {
    std::vector<MaskKind> out;
    for (const KindInfo& info : kind_table()) out.push_back(info.kind);
    return out;
  }();
  return kinds;
}

TokenCount MaskSpec::question_tokens(TokenCount length) const {
  return static_cast<TokenCount>(std::floor(question * static_cast<double>(length)));
}

MaskSpec parse_mask_spec(std::string_view text) {
  const std::string where = quoted(text);
  const std::string_view trimmed = trim(text);
  const std::size_t colon = trimmed.find(':');
  const std::string_view name = trim(trimmed.substr(0, colon));
  const KindInfo* info = nullptr;
  for (const KindInfo& candidate : kind_table()) {
    if (candidate.name == name) info = &candidate;
  }
  if (info == nullptr) {
    throw InvalidInput(where + ": unknown mask kind " + quoted(name) + " (known: " + known_kinds() +
                       ")");
  }
  MaskSpec spec;
  spec.kind = info->kind;
  if (colon == std::string_view::npos) return spec;

  std::vector<std::string_view> seen;
  for (std::string_view item : split(trimmed.substr(colon + 1), ',')) {
    item = trim(item);
    const std::size_t eq = item.find('=');
    if (item.empty() || eq == std::string_view::npos) {
      throw InvalidInput(where + ": expected key=value, got " + quoted(item));
    }
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    if (std::find(info->keys.begin(), info->keys.end(), key) == info->keys.end()) {
      std::string keys;
      for (const std::string_view k : info->keys)
        keys += (keys.empty() ? "" : ", ") + std::string(k);
      throw InvalidInput(where + ": " + std::string(info->name) + " takes no parameter " +
                         quoted(key) +
                         (keys.empty() ? " (it has none)" : " (it takes: " + keys + ")"));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw InvalidInput(where + ": parameter " + quoted(key) + " is given twice");
    }
    seen.push_back(key);
    const std::string what = where + ": " + std::string(key);
    const auto at_least = [&](std::int64_t v, std::int64_t lo) {
      if (v < lo) {
        throw InvalidInput(what + " must be >= " + std::to_string(lo) + ", got " + quoted(value));
      }
      return v;
    };
    if (key == "window") {
      spec.window = at_least(parse_int(value, what), 1);
    } else if (key == "sink") {
      spec.sink = at_least(parse_int(value, what), 0);
    } else if (key == "answers") {
      spec.answers = at_least(parse_int(value, what), 1);
    } else if (key == "block") {
      spec.block = at_least(parse_int(value, what), 1);
    } else if (key == "local") {
      spec.local = at_least(parse_int(value, what), 0);
    } else if (key == "chunk") {
      spec.chunk = at_least(parse_int(value, what), 1);
    } else if (key == "question") {
      spec.question = parse_double(value, what);
      if (!(spec.question >= 0.0 && spec.question < 1.0)) {
        throw InvalidInput(what + " must be in [0, 1), got " + quoted(value));
      }
    }
  }
  return spec;
}

std::string to_string(const MaskSpec& spec) {
  std::string out(to_string(spec.kind));
  switch (spec.kind) {
    case MaskKind::kCausal:
    case MaskKind::kFull:
      break;
    case MaskKind::kSlidingWindow:
      out += ":window=" + std::to_string(spec.window);
      break;
    case MaskKind::kLambda:
      out += ":sink=" + std::to_string(spec.sink) + ",window=" + std::to_string(spec.window);
      break;
    case MaskKind::kSharedQuestion: {
      // Shortest text that parses back to the same double, so printed specs reproduce the mask.
      char buffer[32];
      const auto end = std::to_chars(buffer, buffer + sizeof(buffer), spec.question).ptr;
      out += ":question=" + std::string(buffer, end) + ",answers=" + std::to_string(spec.answers);
      break;
    }
    case MaskKind::kCausalBlockwise:
      out += ":block=" + std::to_string(spec.block) + ",local=" + std::to_string(spec.local);
      break;
    case MaskKind::kChunked:
      out += ":chunk=" + std::to_string(spec.chunk);
      break;
  }
  return out;
}

SequenceMask build_sequence_mask(const MaskSpec& spec, TokenCount length) {
  MaskBuilder builder(length);
  const TokenCount L = length;
  switch (spec.kind) {
    case MaskKind::kCausal:
      add_clipped(builder, 0, L, {prefix_through_row()}, L);
      break;
    case MaskKind::kFull:
      add_clipped(builder, 0, L, {constant(0, L)}, L);
      break;
    case MaskKind::kSlidingWindow: {
      // Step 0: rows i < W see [0, i+1); step 1: later rows see [i-W+1, i+1).
      const TokenCount w = spec.window;
      add_clipped(builder, 0, w, {prefix_through_row()}, L);
      add_clipped(builder, w, L, {trailing_window(w)}, L);
      break;
    }
    case MaskKind::kLambda: {
      // The sink part is [0, i+1) below row S and [0, S) from there; the window part is [0, i+1)
      // below row W and [i-W+1, i+1) from there. The builder merges where they overlap.
      const TokenCount s = spec.sink;
      const TokenCount w = spec.window;
      const AffineInterval sink_early = prefix_through_row();
      const AffineInterval sink_late = constant(0, s);
      const AffineInterval window_early = prefix_through_row();
      const AffineInterval window_late = trailing_window(w);
      const TokenCount lo = std::min(s, w);
      const TokenCount hi = std::max(s, w);
      add_clipped(builder, 0, lo, {sink_early, window_early}, L);
      add_clipped(builder, lo, hi,
                  {s <= w ? sink_late : sink_early, s <= w ? window_early : window_late}, L);
      add_clipped(builder, hi, L, {sink_late, window_late}, L);
      break;
    }
    case MaskKind::kSharedQuestion: {
      const TokenCount q = spec.question_tokens(L);
      const TokenCount n = spec.answers;
      const TokenCount a = (L - q) / n;
      if (a > 0 && n > kMaxMaskSegments) {
        throw InvalidInput(to_string(spec) + ": " + std::to_string(n) + " answers need more than " +
                           std::to_string(kMaxMaskSegments) + " row segments");
      }
      add_clipped(builder, 0, q, {prefix_through_row()}, L);
      // Answers of zero tokens (more answers than tokens) cover no row; the last takes the rest.
      for (TokenCount k = 0; k < n; ++k) {
        const TokenCount start = q + k * a;
        const TokenCount stop = k + 1 < n ? start + a : L;
        if (start < stop)
          add_clipped(builder, start, stop, {constant(0, q), from_through_row(start)}, L);
        if (a == 0) break;  // the remaining answers are empty; the loop would only repeat `start`
      }
      if (builder.rows_added() < L) {
        // a == 0: every answer but the last is empty, and the last starts at q.
        add_clipped(builder, q, L, {constant(0, q), from_through_row(q)}, L);
      }
      break;
    }
    case MaskKind::kCausalBlockwise: {
      const TokenCount c = spec.block;
      const TokenCount blocks = 1 + (L - 1) / c;
      if (blocks <= 2) {
        add_clipped(builder, 0, L, {prefix_through_row()}, L);
        break;
      }
      const TokenCount last_block_start = (blocks - 1) * c;
      // First block causal; middle rows below (K+1)*C start their local part at C, later ones at
      // i-K*C; the last block is causal again.
      // local >= blocks reaches back past the first block already; clamping avoids overflow.
      const TokenCount k_c = std::min<TokenCount>(spec.local, blocks) * c;
      add_clipped(builder, 0, c, {prefix_through_row()}, L);
      add_clipped(builder, c, std::min(k_c + c, last_block_start),
                  {constant(0, c), from_through_row(c)}, L);
      add_clipped(builder, k_c + c, last_block_start,
                  {constant(0, c), AffineInterval{-k_c, 1, 1, 1}}, L);
      add_clipped(builder, last_block_start, L, {prefix_through_row()}, L);
      break;
    }
    case MaskKind::kChunked: {
      // One row range per chunk, each causal from the chunk's start: ceil(L/C) segments (the
      // builder merges them into one when C is 1). The chunk end is clipped before it is formed,
      // so a chunk near the int64 limit cannot overflow.
      const TokenCount c = spec.chunk;
      for (TokenCount start = 0; start < L; start += std::min(c, L - start)) {
        const TokenCount stop = c >= L - start ? L : start + c;
        add_clipped(builder, start, stop, {from_through_row(start)}, L);
      }
      break;
    }
  }
  return std::move(builder).finish();
}

std::vector<SequenceMask> build_batch_mask(const MaskSpec& spec, const SequenceBatch& batch) {
  std::vector<SequenceMask> masks;
  masks.reserve(static_cast<std::size_t>(batch.size()));
  for (SeqIndex s = 0; s < batch.size(); ++s)
    masks.push_back(build_sequence_mask(spec, batch.length(s)));
  return masks;
}

}  // namespace dcp
