// SPDX-License-Identifier: Apache-2.0
// The fp64 oracle: full softmax per row, products by cblas_dgemm over chunks of query rows.
#include "dcp/kernels/reference/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"

#include "dcp/kernels/blas_setup.h"

#include <cblas.h>

namespace dcp::kernels {
namespace {

// Query rows per dgemm: S for 64 rows of an 8k-key block is 4 MiB, and the calls stay large.
constexpr std::int32_t kRowChunk = 64;

void check_shape(const AttentionParams& p) {
  if (p.q_heads < 1 || p.kv_heads < 1 || p.head_dim < 1 || p.q_heads % p.kv_heads != 0) {
    throw InvalidInput("bad attention shape: q_heads " + std::to_string(p.q_heads) + ", kv_heads " +
                       std::to_string(p.kv_heads) + ", head_dim " + std::to_string(p.head_dim));
  }
}

// allowed[c] = 1 for the keys row r attends to.
void row_allowed(TileMaskView mask, std::int32_t r, std::int32_t kv_tokens,
                 std::vector<unsigned char>& allowed) {
  allowed.assign(to_size(kv_tokens), mask.full() ? 1 : 0);
  if (mask.full()) return;
  for (std::int32_t i = mask.row_offsets[r]; i < mask.row_offsets[r + 1]; ++i) {
    std::fill(allowed.begin() + mask.intervals[2 * i], allowed.begin() + mask.intervals[2 * i + 1],
              1);
  }
}

}  // namespace

void reference_forward(const AttentionParams& params, std::int32_t q_tokens, std::int32_t kv_tokens,
                       const double* q, const double* k, const double* v, TileMaskView mask,
                       double* o, double* lse) {
  check_shape(params);
  ensure_blas_single_threaded();
  const std::int32_t qh = params.q_heads, kvh = params.kv_heads, d = params.head_dim;
  const std::int32_t group = qh / kvh;
  const double scale = params.softmax_scale;
  if (q_tokens <= 0) return;
  if (kv_tokens <= 0) {
    std::fill_n(o, to_size(std::int64_t{q_tokens} * qh * d), 0.0);
    std::fill_n(lse, to_size(std::int64_t{q_tokens} * qh), kNegInf);
    return;
  }
  std::vector<double> s(to_size(std::int64_t{kRowChunk} * kv_tokens));
  std::vector<unsigned char> allowed;
  for (std::int32_t j = 0; j < qh; ++j) {
    const std::int32_t h = j / group;  // GQA: q head j reads kv head j / (q_heads / kv_heads)
    for (std::int32_t r0 = 0; r0 < q_tokens; r0 += kRowChunk) {
      const std::int32_t rows = std::min(kRowChunk, q_tokens - r0);
      // s = scale * q_j k_h^T for these rows and every key.
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kv_tokens, d, scale,
                  q + to_size((std::int64_t{r0} * qh + j) * d), qh * d, k + to_size(h * d), kvh * d,
                  0.0, s.data(), kv_tokens);
      for (std::int32_t i = 0; i < rows; ++i) {
        const std::int32_t r = r0 + i;
        double* srow = s.data() + to_size(std::int64_t{i} * kv_tokens);
        row_allowed(mask, r, kv_tokens, allowed);
        double m = kNegInf;
        for (std::int32_t c = 0; c < kv_tokens; ++c) {
          if (allowed[to_size(c)] != 0) m = std::max(m, srow[c]);
        }
        double& row_lse = lse[to_size(std::int64_t{j} * q_tokens + r)];
        if (m == kNegInf) {
          // No unmasked key: lse = -inf and p = 0 (never exp(-inf - (-inf))).
          row_lse = kNegInf;
          std::fill_n(srow, kv_tokens, 0.0);
          continue;
        }
        // lse = m + log(sum exp(s - m)): the max shift keeps every exp <= 1.
        double sum = 0;
        for (std::int32_t c = 0; c < kv_tokens; ++c) {
          if (allowed[to_size(c)] != 0) sum += std::exp(srow[c] - m);
        }
        row_lse = m + std::log(sum);
        for (std::int32_t c = 0; c < kv_tokens; ++c) {
          srow[c] = allowed[to_size(c)] != 0 ? std::exp(srow[c] - row_lse) : 0.0;
        }
      }
      // o_j = p v_h.
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, kv_tokens, 1.0, s.data(),
                  kv_tokens, v + to_size(h * d), kvh * d, 0.0,
                  o + to_size((std::int64_t{r0} * qh + j) * d), qh * d);
    }
  }
}

void reference_delta(std::int32_t tokens, std::int32_t heads, std::int32_t head_dim,
                     const double* o, const double* dout, double* delta) {
  for (std::int32_t t = 0; t < tokens; ++t) {
    for (std::int32_t h = 0; h < heads; ++h) {
      const std::size_t base = to_size((std::int64_t{t} * heads + h) * head_dim);
      double sum = 0;
      for (std::int32_t x = 0; x < head_dim; ++x)
        sum += o[base + to_size(x)] * dout[base + to_size(x)];
      delta[to_size(std::int64_t{h} * tokens + t)] = sum;
    }
  }
}

void reference_backward(const AttentionParams& params, std::int32_t q_tokens,
                        std::int32_t kv_tokens, const double* q, const double* k, const double* v,
                        TileMaskView mask, const double* dout, const double* lse,
                        const double* delta, double* dq, double* dk, double* dv) {
  check_shape(params);
  ensure_blas_single_threaded();
  const std::int32_t qh = params.q_heads, kvh = params.kv_heads, d = params.head_dim;
  const std::int32_t group = qh / kvh;
  const double scale = params.softmax_scale;
  if (q_tokens > 0) std::fill_n(dq, to_size(std::int64_t{q_tokens} * qh * d), 0.0);
  if (kv_tokens > 0) {
    std::fill_n(dk, to_size(std::int64_t{kv_tokens} * kvh * d), 0.0);
    std::fill_n(dv, to_size(std::int64_t{kv_tokens} * kvh * d), 0.0);
  }
  if (q_tokens <= 0 || kv_tokens <= 0) return;
  std::vector<double> p(to_size(std::int64_t{kRowChunk} * kv_tokens));
  std::vector<double> ds(p.size());
  std::vector<unsigned char> allowed;
  for (std::int32_t j = 0; j < qh; ++j) {
    const std::int32_t h = j / group;
    const double* kh = k + to_size(h * d);
    const double* vh = v + to_size(h * d);
    for (std::int32_t r0 = 0; r0 < q_tokens; r0 += kRowChunk) {
      const std::int32_t rows = std::min(kRowChunk, q_tokens - r0);
      const double* qj = q + to_size((std::int64_t{r0} * qh + j) * d);
      const double* doj = dout + to_size((std::int64_t{r0} * qh + j) * d);
      // p = exp(scale q k^T - lse) on unmasked keys, from the row's final lse.
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kv_tokens, d, scale, qj, qh * d,
                  kh, kvh * d, 0.0, p.data(), kv_tokens);
      // dp = dout v^T.
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kv_tokens, d, 1.0, doj, qh * d, vh,
                  kvh * d, 0.0, ds.data(), kv_tokens);
      for (std::int32_t i = 0; i < rows; ++i) {
        const std::int32_t r = r0 + i;
        const double row_lse = lse[to_size(std::int64_t{j} * q_tokens + r)];
        const double row_delta = delta[to_size(std::int64_t{j} * q_tokens + r)];
        row_allowed(mask, r, kv_tokens, allowed);
        double* prow = p.data() + to_size(std::int64_t{i} * kv_tokens);
        double* dsrow = ds.data() + to_size(std::int64_t{i} * kv_tokens);
        for (std::int32_t c = 0; c < kv_tokens; ++c) {
          // lse = -inf means the row has no key anywhere: p = 0, not exp(-inf - (-inf)).
          const bool on = allowed[to_size(c)] != 0 && row_lse != kNegInf;
          prow[c] = on ? std::exp(prow[c] - row_lse) : 0.0;
          dsrow[c] = prow[c] * (dsrow[c] - row_delta);  // dS = P * (dP - delta)
        }
      }
      // dq_j = scale dS k_h (each row and head is computed once, so overwrite).
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, kv_tokens, scale, ds.data(),
                  kv_tokens, kh, kvh * d, 0.0, dq + to_size((std::int64_t{r0} * qh + j) * d),
                  qh * d);
      // dk_h += scale dS^T q_j and dv_h += P^T dout_j: the q heads of a group add up.
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kv_tokens, d, rows, scale, ds.data(),
                  kv_tokens, qj, qh * d, 1.0, dk + to_size(h * d), kvh * d);
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kv_tokens, d, rows, 1.0, p.data(),
                  kv_tokens, doj, qh * d, 1.0, dv + to_size(h * d), kvh * d);
    }
  }
}

}  // namespace dcp::kernels
