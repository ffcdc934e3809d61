// SPDX-License-Identifier: Apache-2.0
// ReferenceKernels: the kernel interface on the fp64 oracle, one row at a time on one thread.
#include <algorithm>
#include <cmath>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/kernels/blas_setup.h"
#include "dcp/kernels/reference/reference_attention.h"

namespace dcp::kernels {
namespace {

std::vector<double> to_double(ElementType type, const void* src, std::size_t n) {
  std::vector<float> f(n);
  to_float(type, src, f.data(), n);
  return {f.begin(), f.end()};
}

// A row's tiles concatenated into one kv block, with the masks shifted to match.
struct ConcatenatedKv {
  std::vector<double> k, v;
  std::vector<std::int32_t> row_offsets, intervals;
  std::vector<std::int32_t> tile_offset;  // first key of each tile in the block
  std::int32_t kv_tokens = 0;
  TileMaskView mask() const { return {row_offsets.data(), intervals.data()}; }
};

template <typename Tile>
ConcatenatedKv concatenate(const AttentionParams& params, std::int32_t q_tokens,
                           std::span<const Tile> tiles) {
  ConcatenatedKv kv;
  const std::size_t width = to_size(std::int64_t{params.kv_heads} * params.head_dim);
  for (const Tile& tile : tiles) {
    kv.tile_offset.push_back(kv.kv_tokens);
    const std::size_t n = to_size(tile.kv_tokens) * width;
    const auto k = to_double(params.storage, tile.k, n);
    const auto v = to_double(params.storage, tile.v, n);
    kv.k.insert(kv.k.end(), k.begin(), k.end());
    kv.v.insert(kv.v.end(), v.begin(), v.end());
    kv.kv_tokens += tile.kv_tokens;
  }
  kv.row_offsets.push_back(0);
  for (std::int32_t r = 0; r < q_tokens; ++r) {
    for (std::size_t t = 0; t < tiles.size(); ++t) {
      const Tile& tile = tiles[t];
      const std::int32_t shift = kv.tile_offset[t];
      if (tile.kv_tokens == 0) continue;
      if (tile.mask.full()) {
        kv.intervals.insert(kv.intervals.end(), {shift, shift + tile.kv_tokens});
        continue;
      }
      for (std::int32_t i = tile.mask.row_offsets[r]; i < tile.mask.row_offsets[r + 1]; ++i) {
        kv.intervals.insert(kv.intervals.end(), {shift + tile.mask.intervals[2 * i],
                                                 shift + tile.mask.intervals[2 * i + 1]});
      }
    }
    kv.row_offsets.push_back(static_cast<std::int32_t>(kv.intervals.size() / 2));
  }
  return kv;
}

// Log-sum-exp merge of (o2, l2) into (o1, l1) over disjoint keys: with M = max(l1, l2),
// l = M + log(exp(l1 - M) + exp(l2 - M)) and o = sum_j exp(l_j - l) o_j. Both -inf gives o = 0
// and l = -inf; a -inf side gets weight exactly 0 (no exp(-inf - (-inf))).
void merge_row(double* o1, double& l1, const double* o2, double l2, std::int32_t d) {
  const double m = std::max(l1, l2);
  if (m == kNegInf) {
    std::fill_n(o1, d, 0.0);
    l1 = kNegInf;
    return;
  }
  const double w1 = l1 == kNegInf ? 0.0 : std::exp(l1 - m);
  const double w2 = l2 == kNegInf ? 0.0 : std::exp(l2 - m);
  const double l = m + std::log(w1 + w2);
  const double a1 = l1 == kNegInf ? 0.0 : std::exp(l1 - l);
  const double a2 = l2 == kNegInf ? 0.0 : std::exp(l2 - l);
  for (std::int32_t x = 0; x < d; ++x) o1[x] = a1 * o1[x] + a2 * o2[x];
  l1 = l;
}

}  // namespace

ReferenceKernels::ReferenceKernels() { ensure_blas_single_threaded(); }

void ReferenceKernels::forward(const AttentionParams& params, std::span<const ForwardRow> rows) {
  const std::int32_t qh = params.q_heads, d = params.head_dim;
  for (const ForwardRow& row : rows) {
    if (row.q_tokens <= 0) continue;
    const std::size_t q_size = to_size(std::int64_t{row.q_tokens} * qh * d);
    const auto q = to_double(params.storage, row.q, q_size);
    const ConcatenatedKv kv = concatenate(params, row.q_tokens, row.tiles);
    std::vector<double> o(q_size), lse(to_size(std::int64_t{row.q_tokens} * qh));
    reference_forward(params, row.q_tokens, kv.kv_tokens, q.data(), kv.k.data(), kv.v.data(),
                      kv.mask(), o.data(), lse.data());
    for (std::int32_t t = 0; t < row.q_tokens; ++t) {
      for (std::int32_t j = 0; j < qh; ++j) {
        const std::size_t li = to_size(std::int64_t{j} * row.q_tokens + t);
        const std::size_t oi = to_size((std::int64_t{t} * qh + j) * d);
        if (row.accumulate) {
          std::vector<double> old(row.o + oi, row.o + oi + d);
          double old_lse = row.lse[li];
          merge_row(old.data(), old_lse, o.data() + oi, lse[li], d);
          std::copy(old.begin(), old.end(), o.begin() + static_cast<std::ptrdiff_t>(oi));
          lse[li] = old_lse;
        }
        for (std::int32_t x = 0; x < d; ++x)
          row.o[oi + to_size(x)] = static_cast<float>(o[oi + to_size(x)]);
        row.lse[li] = static_cast<float>(lse[li]);
      }
    }
  }
}

void ReferenceKernels::backward(const AttentionParams& params, std::span<const BackwardRow> rows) {
  const std::int32_t qh = params.q_heads, kvh = params.kv_heads, d = params.head_dim;
  for (const BackwardRow& row : rows) {
    const std::int32_t lq = std::max(row.q_tokens, 0);
    const std::size_t q_size = to_size(std::int64_t{lq} * qh * d);
    const auto q = to_double(params.storage, row.q, q_size);
    const auto dout = to_double(params.storage, row.dout, q_size);
    const std::size_t stat_size = to_size(std::int64_t{lq} * qh);
    const std::vector<double> lse(row.lse, row.lse + stat_size);
    const std::vector<double> delta(row.delta, row.delta + stat_size);
    const ConcatenatedKv kv = concatenate(params, lq, row.tiles);
    std::vector<double> dq(q_size);
    const std::size_t width = to_size(std::int64_t{kvh} * d);
    std::vector<double> dk(to_size(kv.kv_tokens) * width), dv(dk.size());
    reference_backward(params, lq, kv.kv_tokens, q.data(), kv.k.data(), kv.v.data(), kv.mask(),
                       dout.data(), lse.data(), delta.data(), dq.data(), dk.data(), dv.data());
    for (std::size_t i = 0; i < q_size; ++i) {
      row.dq[i] = static_cast<float>(row.accumulate ? row.dq[i] + dq[i] : dq[i]);
    }
    for (std::size_t t = 0; t < row.tiles.size(); ++t) {
      const BackwardTile& tile = row.tiles[t];
      const std::size_t base = to_size(kv.tile_offset[t]) * width;
      const std::size_t n = to_size(tile.kv_tokens) * width;
      for (std::size_t i = 0; i < n; ++i) {
        tile.dk[i] = static_cast<float>(tile.accumulate ? tile.dk[i] + dk[base + i] : dk[base + i]);
        tile.dv[i] = static_cast<float>(tile.accumulate ? tile.dv[i] + dv[base + i] : dv[base + i]);
      }
    }
  }
}

void ReferenceKernels::merge(float* o_dst, float* lse_dst, const float* o_src, const float* lse_src,
                             std::int32_t tokens, std::int32_t heads, std::int32_t head_dim) {
  std::vector<double> o1(to_size(head_dim)), o2(to_size(head_dim));
  for (std::int32_t t = 0; t < tokens; ++t) {
    for (std::int32_t h = 0; h < heads; ++h) {
      const std::size_t oi = to_size((std::int64_t{t} * heads + h) * head_dim);
      const std::size_t li = to_size(std::int64_t{h} * tokens + t);
      std::copy_n(o_dst + oi, head_dim, o1.begin());
      std::copy_n(o_src + oi, head_dim, o2.begin());
      double l1 = lse_dst[li];
      merge_row(o1.data(), l1, o2.data(), lse_src[li], head_dim);
      for (std::int32_t x = 0; x < head_dim; ++x)
        o_dst[oi + to_size(x)] = static_cast<float>(o1[to_size(x)]);
      lse_dst[li] = static_cast<float>(l1);
    }
  }
}

void ReferenceKernels::add(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void ReferenceKernels::delta(ElementType storage, const void* o, const void* dout,
                             std::int32_t tokens, std::int32_t heads, std::int32_t head_dim,
                             float* delta) {
  const std::size_t n = to_size(std::int64_t{tokens} * heads * head_dim);
  const auto od = to_double(storage, o, n);
  const auto dd = to_double(storage, dout, n);
  std::vector<double> result(to_size(std::int64_t{tokens} * heads));
  reference_delta(tokens, heads, head_dim, od.data(), dd.data(), result.data());
  for (std::size_t i = 0; i < result.size(); ++i) delta[i] = static_cast<float>(result[i]);
}

}  // namespace dcp::kernels
