// SPDX-License-Identifier: Apache-2.0
// CpuKernels' element-wise operations (merge, add, delta) and the helpers both passes share.
#include "dcp/kernels/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "dcp/core/error.h"

#include "dcp/kernels/blas_setup.h"
#include "dcp/kernels/cpu/cpu_internal.h"

namespace dcp::kernels {
namespace {

// Elements per parallel piece of the element-wise operations: large enough that a piece
// outweighs the pool's hand-off, small enough to split a block between the threads.
constexpr std::size_t kPiece = std::size_t{1} << 15;

}  // namespace

SubtileShape cpu_subtile_shape(bool forward) {
  return forward ? SubtileShape{kForwardQChunk, kForwardKvChunk}
                 : SubtileShape{kBackwardQChunk, kBackwardKvChunk};
}

void check_params(const AttentionParams& params) {
  if (params.q_heads < 1 || params.kv_heads < 1 || params.head_dim < 1 ||
      params.q_heads % params.kv_heads != 0) {
    throw InvalidInput("bad attention shape: q_heads " + std::to_string(params.q_heads) +
                       ", kv_heads " + std::to_string(params.kv_heads) + ", head_dim " +
                       std::to_string(params.head_dim));
  }
}

void Fp32Inputs::add(const void* src, std::size_t n) {
  if (type_ == ElementType::kFp32 || n == 0) return;
  auto& size = sizes_[src];
  size = std::max(size, n);
}

void Fp32Inputs::convert(ThreadPool& pool) {
  struct Piece {
    const void* src;
    float* dst;
    std::size_t begin, end;
  };
  std::vector<Piece> pieces;
  const std::size_t bytes = element_size(type_);
  for (const auto& [src, n] : sizes_) {
    auto& dst = converted_[src];
    dst.resize(n);
    for (std::size_t b = 0; b < n; b += kPiece)
      pieces.push_back({src, dst.data(), b, std::min(n, b + kPiece)});
  }
  pool.parallel_for(pieces.size(), [&](std::size_t i, int) {
    const Piece& p = pieces[i];
    to_float(type_, static_cast<const unsigned char*>(p.src) + p.begin * bytes, p.dst + p.begin,
             p.end - p.begin);
  });
}

const float* Fp32Inputs::get(const void* src) const {
  if (type_ == ElementType::kFp32) return static_cast<const float*>(src);
  const auto it = converted_.find(src);
  return it == converted_.end() ? nullptr : it->second.data();
}

void merge_row(float* o1, float& l1, const float* o2, float l2, std::int32_t head_dim) {
  const float m = std::max(l1, l2);
  if (m == kNegInf) {
    std::fill_n(o1, head_dim, 0.0f);
    l1 = kNegInf;
    return;
  }
  const float w1 = l1 == kNegInf ? 0.0f : std::exp(l1 - m);
  const float w2 = l2 == kNegInf ? 0.0f : std::exp(l2 - m);
  const float sum = w1 + w2;                 // >= 1: the larger side has weight exp(0)
  const float a1 = w1 / sum, a2 = w2 / sum;  // exp(l_j - l) with l = m + log(sum)
  for (std::int32_t x = 0; x < head_dim; ++x) o1[x] = a1 * o1[x] + a2 * o2[x];
  l1 = m + std::log(sum);
}

CpuKernels::CpuKernels(int threads) : pool_(threads) { ensure_blas_single_threaded(); }

void CpuKernels::forward(const AttentionParams& params, std::span<const ForwardRow> rows) {
  cpu_forward(pool_, params, rows);
}

void CpuKernels::backward(const AttentionParams& params, std::span<const BackwardRow> rows) {
  cpu_backward(pool_, params, rows);
}

void CpuKernels::merge(float* o_dst, float* lse_dst, const float* o_src, const float* lse_src,
                       std::int32_t tokens, std::int32_t heads, std::int32_t head_dim) {
  if (tokens <= 0 || heads <= 0 || head_dim <= 0) return;
  const std::size_t row_elems = to_size(std::int64_t{heads} * head_dim);
  const std::size_t tokens_per_piece = std::max<std::size_t>(1, kPiece / row_elems);
  const std::size_t n_tokens = to_size(tokens);
  const std::size_t pieces = (n_tokens + tokens_per_piece - 1) / tokens_per_piece;
  pool_.parallel_for(pieces, [&](std::size_t piece, int) {
    const std::size_t end = std::min(n_tokens, (piece + 1) * tokens_per_piece);
    for (std::size_t t = piece * tokens_per_piece; t < end; ++t) {
      for (std::int32_t h = 0; h < heads; ++h) {
        const std::size_t oi = t * row_elems + to_size(std::int64_t{h} * head_dim);
        const std::size_t li = to_size(std::int64_t{h} * tokens) + t;
        merge_row(o_dst + oi, lse_dst[li], o_src + oi, lse_src[li], head_dim);
      }
    }
  });
}

void CpuKernels::add(float* dst, const float* src, std::size_t n) {
  pool_.parallel_for((n + kPiece - 1) / kPiece, [&](std::size_t piece, int) {
    const std::size_t end = std::min(n, (piece + 1) * kPiece);
    for (std::size_t i = piece * kPiece; i < end; ++i) dst[i] += src[i];
  });
}

void CpuKernels::delta(ElementType storage, const void* o, const void* dout, std::int32_t tokens,
                       std::int32_t heads, std::int32_t head_dim, float* delta) {
  if (tokens <= 0 || heads <= 0 || head_dim <= 0) return;
  const std::size_t row_elems = to_size(std::int64_t{heads} * head_dim);
  const std::size_t tokens_per_piece = std::max<std::size_t>(1, kPiece / row_elems);
  const std::size_t n_tokens = to_size(tokens);
  const std::size_t pieces = (n_tokens + tokens_per_piece - 1) / tokens_per_piece;
  const std::size_t bytes = element_size(storage);
  pool_.parallel_for(pieces, [&](std::size_t piece, int) {
    const std::size_t begin = piece * tokens_per_piece;
    const std::size_t end = std::min(n_tokens, begin + tokens_per_piece);
    const std::size_t n = (end - begin) * row_elems;
    std::vector<float> of(n), df(n);
    to_float(storage, static_cast<const unsigned char*>(o) + begin * row_elems * bytes, of.data(),
             n);
    to_float(storage, static_cast<const unsigned char*>(dout) + begin * row_elems * bytes,
             df.data(), n);
    for (std::size_t t = begin; t < end; ++t) {
      for (std::int32_t h = 0; h < heads; ++h) {
        const std::size_t base = (t - begin) * row_elems + to_size(std::int64_t{h} * head_dim);
        float sum = 0;
        for (std::size_t x = 0; x < to_size(head_dim); ++x) sum += of[base + x] * df[base + x];
        delta[to_size(std::int64_t{h} * tokens) + t] = sum;
      }
    }
  });
}

}  // namespace dcp::kernels
