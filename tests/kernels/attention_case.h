// SPDX-License-Identifier: Apache-2.0
// Test fixtures for the attention kernels: random interval masks, random problems of several
// rows and tiles in a storage type, and runners that drive any kernel set over them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/ids.h"
#include "dcp/core/rng.h"

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels::testing {

// What the fp32 CPU kernels may differ from the fp64 reference by.
inline constexpr double kFp32Tolerance = 1e-4;

// A tile mask in owned storage.
struct MaskData {
  bool full = true;
  std::vector<std::int32_t> row_offsets, intervals;
  TileMaskView view() const {
    if (full) return {};
    return {row_offsets.data(), intervals.data()};
  }
  bool attends(std::int32_t r, std::int32_t c) const {
    if (full) return true;
    for (std::int32_t i = row_offsets[to_size(r)]; i < row_offsets[to_size(r) + 1]; ++i) {
      if (c >= intervals[to_size(2 * i)] && c < intervals[to_size(2 * i + 1)]) return true;
    }
    return false;
  }
};

inline MaskData full_mask() { return {}; }

// Row r attends keys [0, r + 1 + shift), clipped to the tile (rows with a bound <= 0 attend
// nothing): shift 0 is the diagonal tile of a causal mask.
inline MaskData causal_mask(std::int32_t q_tokens, std::int32_t kv_tokens, std::int32_t shift) {
  MaskData m;
  m.full = false;
  m.row_offsets.push_back(0);
  for (std::int32_t r = 0; r < q_tokens; ++r) {
    const std::int32_t end = std::min(kv_tokens, r + 1 + shift);
    if (end > 0) m.intervals.insert(m.intervals.end(), {0, end});
    m.row_offsets.push_back(static_cast<std::int32_t>(m.intervals.size() / 2));
  }
  return m;
}

// Up to max_intervals sorted, disjoint, non-empty intervals per row; a row is empty with
// probability empty_row_probability.
inline MaskData random_mask(Rng& rng, std::int32_t q_tokens, std::int32_t kv_tokens,
                            int max_intervals, double empty_row_probability) {
  MaskData m;
  m.full = false;
  m.row_offsets.push_back(0);
  for (std::int32_t r = 0; r < q_tokens; ++r) {
    if (rng.uniform01() >= empty_row_probability && kv_tokens > 0) {
      const auto count = rng.uniform_int(1, max_intervals);
      std::vector<std::int32_t> cuts;
      for (std::int64_t i = 0; i < 2 * count; ++i) {
        cuts.push_back(static_cast<std::int32_t>(rng.uniform_int(0, kv_tokens)));
      }
      std::sort(cuts.begin(), cuts.end());
      for (std::size_t i = 0; i + 1 < cuts.size(); i += 2) {
        if (cuts[i] < cuts[i + 1]) m.intervals.insert(m.intervals.end(), {cuts[i], cuts[i + 1]});
      }
    }
    m.row_offsets.push_back(static_cast<std::int32_t>(m.intervals.size() / 2));
  }
  return m;
}

// Values rounded to the storage type, and their storage bytes.
struct Stored {
  std::vector<float> values;
  std::vector<unsigned char> bytes;
};

inline Stored random_stored(Rng& rng, ElementType type, std::size_t n, double magnitude) {
  std::vector<float> raw(n);
  for (auto& x : raw) x = static_cast<float>(magnitude * rng.normal());
  Stored s;
  s.bytes.resize(n * element_size(type) + 1);  // + 1: never a zero-size buffer
  from_float(type, raw.data(), s.bytes.data(), n);
  s.values.resize(n);
  to_float(type, s.bytes.data(), s.values.data(), n);
  return s;
}

struct TileData {
  std::int32_t kv_tokens = 0;
  MaskData mask;
  Stored k, v;
};

struct RowData {
  std::int32_t q_tokens = 0;
  Stored q, dout;
  std::vector<TileData> tiles;
};

// Everything a call writes, per row (o, lse, dq) and per tile (dk, dv).
struct Outputs {
  std::vector<std::vector<float>> o, lse, dq;
  std::vector<std::vector<std::vector<float>>> dk, dv;
};

class AttentionCase {
 public:
  AttentionCase(AttentionParams params, std::uint64_t seed, double magnitude = 1.0)
      : params_(params), rng_(seed), magnitude_(magnitude) {}

  const AttentionParams& params() const { return params_; }
  Rng& rng() { return rng_; }
  std::vector<RowData>& rows() { return rows_; }

  std::size_t add_row(std::int32_t q_tokens) {
    RowData row;
    row.q_tokens = q_tokens;
    const std::size_t n = to_size(std::int64_t{q_tokens} * params_.q_heads * params_.head_dim);
    row.q = random_stored(rng_, params_.storage, n, magnitude_);
    row.dout = random_stored(rng_, params_.storage, n, 1.0);
    rows_.push_back(std::move(row));
    return rows_.size() - 1;
  }

  void add_tile(std::size_t row, std::int32_t kv_tokens, MaskData mask) {
    TileData tile;
    tile.kv_tokens = kv_tokens;
    tile.mask = std::move(mask);
    const std::size_t n = to_size(std::int64_t{kv_tokens} * params_.kv_heads * params_.head_dim);
    tile.k = random_stored(rng_, params_.storage, n, magnitude_);
    tile.v = random_stored(rng_, params_.storage, n, 1.0);
    rows_[row].tiles.push_back(std::move(tile));
  }

  // Zeroed outputs of the right sizes (or filled with `fill`).
  Outputs make_outputs(float fill = 0.0f) const {
    Outputs out;
    for (const RowData& row : rows_) {
      const std::size_t n =
          to_size(std::int64_t{row.q_tokens} * params_.q_heads * params_.head_dim);
      out.o.emplace_back(n, fill);
      out.dq.emplace_back(n, fill);
      out.lse.emplace_back(to_size(std::int64_t{row.q_tokens} * params_.q_heads), fill);
      out.dk.emplace_back();
      out.dv.emplace_back();
      for (const TileData& tile : row.tiles) {
        const std::size_t m =
            to_size(std::int64_t{tile.kv_tokens} * params_.kv_heads * params_.head_dim);
        out.dk.back().emplace_back(m, fill);
        out.dv.back().emplace_back(m, fill);
      }
    }
    return out;
  }

  // Forward over tiles [first, last) of every row into `out`.
  void forward(AttentionKernels& kernels, Outputs& out, bool accumulate = false,
               std::size_t first = 0, std::size_t last = SIZE_MAX) const {
    std::vector<std::vector<ForwardTile>> tiles(rows_.size());
    std::vector<ForwardRow> rows;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const RowData& row = rows_[r];
      for (std::size_t t = first; t < std::min(last, row.tiles.size()); ++t) {
        const TileData& tile = row.tiles[t];
        tiles[r].push_back(
            {tile.k.bytes.data(), tile.v.bytes.data(), tile.kv_tokens, tile.mask.view()});
      }
      ForwardRow fr;
      fr.q = row.q.bytes.data();
      fr.q_tokens = row.q_tokens;
      fr.tiles = tiles[r];
      fr.o = out.o[r].data();
      fr.lse = out.lse[r].data();
      fr.accumulate = accumulate;
      rows.push_back(fr);
    }
    kernels.forward(params_, rows);
  }

  // The final lse (from `stats`, a forward over all tiles) and delta = rowsum(dout * o), in fp64
  // from the fp32 o.
  std::vector<std::vector<float>> deltas(const Outputs& stats) const {
    std::vector<std::vector<float>> result;
    const std::int32_t qh = params_.q_heads, d = params_.head_dim;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const RowData& row = rows_[r];
      std::vector<float> delta(to_size(std::int64_t{row.q_tokens} * qh));
      for (std::int32_t t = 0; t < row.q_tokens; ++t) {
        for (std::int32_t j = 0; j < qh; ++j) {
          double sum = 0;
          for (std::int32_t x = 0; x < d; ++x) {
            const std::size_t i = to_size((std::int64_t{t} * qh + j) * d + x);
            sum += double{stats.o[r][i]} * row.dout.values[i];
          }
          delta[to_size(std::int64_t{j} * row.q_tokens + t)] = static_cast<float>(sum);
        }
      }
      result.push_back(std::move(delta));
    }
    return result;
  }

  // Backward over all tiles into `out` (dq, dk, dv), from the lse in `stats` and `deltas`.
  void backward(AttentionKernels& kernels, const Outputs& stats,
                const std::vector<std::vector<float>>& deltas, Outputs& out,
                bool accumulate = false) const {
    std::vector<std::vector<BackwardTile>> tiles(rows_.size());
    std::vector<BackwardRow> rows;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const RowData& row = rows_[r];
      for (std::size_t t = 0; t < row.tiles.size(); ++t) {
        const TileData& tile = row.tiles[t];
        BackwardTile bt;
        bt.k = tile.k.bytes.data();
        bt.v = tile.v.bytes.data();
        bt.kv_tokens = tile.kv_tokens;
        bt.mask = tile.mask.view();
        bt.dk = out.dk[r][t].data();
        bt.dv = out.dv[r][t].data();
        bt.accumulate = accumulate;
        tiles[r].push_back(bt);
      }
      BackwardRow br;
      br.q = row.q.bytes.data();
      br.dout = row.dout.bytes.data();
      br.lse = stats.lse[r].data();
      br.delta = deltas[r].data();
      br.q_tokens = row.q_tokens;
      br.tiles = tiles[r];
      br.dq = out.dq[r].data();
      br.accumulate = accumulate;
      rows.push_back(br);
    }
    kernels.backward(params_, rows);
  }

 private:
  AttentionParams params_;
  Rng rng_;
  double magnitude_;
  std::vector<RowData> rows_;
};

// Two rows that cover the kernels' cases at once: intervals cutting sub-tiles anywhere (random
// masks with up to 3 intervals per row, some rows empty), a shifted causal tile, a full tile, and
// sizes that are not multiples of any chunk.
inline void add_mixed_rows(AttentionCase& c) {
  const std::size_t a = c.add_row(140);
  c.add_tile(a, 270, random_mask(c.rng(), 140, 270, 3, 0.2));
  c.add_tile(a, 33, random_mask(c.rng(), 140, 33, 2, 0.5));
  const std::size_t b = c.add_row(37);
  c.add_tile(b, 130, causal_mask(37, 130, 60));
  c.add_tile(b, 20, full_mask());
}

inline double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) {
    if (std::isfinite(v)) m = std::max(m, std::abs(double{v}));
  }
  return m;
}

// Every element within tolerance * max|expected| (at least `floor` absolute); -inf must match
// -inf exactly, and nothing may be NaN.
inline void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                         double tolerance, const char* what, double floor = 1e-30) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  const double bound = std::max(tolerance * max_abs(expected), floor);
  double worst = 0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_FALSE(std::isnan(actual[i])) << what << " is NaN at " << i;
    if (std::isinf(expected[i]) || std::isinf(actual[i])) {
      ASSERT_EQ(actual[i], expected[i]) << what << " at " << i;
      continue;
    }
    const double err = std::abs(double{actual[i]} - double{expected[i]});
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, bound) << what << ": worst error at " << worst_at << " (actual "
                          << actual[worst_at] << ", expected " << expected[worst_at] << ")";
}

// `floor`: an absolute bound for tensors whose exact value is 0 by cancellation (dS = P (dP -
// delta) of a one-key row), where a bound relative to the result itself would be meaningless.
inline void expect_all_close(const Outputs& actual, const Outputs& expected, double tolerance,
                             bool forward, bool backward, double floor = 1e-30) {
  for (std::size_t r = 0; r < expected.o.size(); ++r) {
    if (forward) {
      expect_close(actual.o[r], expected.o[r], tolerance, "o", floor);
      expect_close(actual.lse[r], expected.lse[r], tolerance, "lse", floor);
    }
    if (backward) {
      expect_close(actual.dq[r], expected.dq[r], tolerance, "dq", floor);
      for (std::size_t t = 0; t < expected.dk[r].size(); ++t) {
        expect_close(actual.dk[r][t], expected.dk[r][t], tolerance, "dk", floor);
        expect_close(actual.dv[r][t], expected.dv[r][t], tolerance, "dv", floor);
      }
    }
  }
}

}  // namespace dcp::kernels::testing
