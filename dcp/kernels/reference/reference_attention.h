// SPDX-License-Identifier: Apache-2.0
// The fp64 attention oracle (plain full-softmax forward and backward of one q block against one
// kv block) and ReferenceKernels, the kernel set built on it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "dcp/kernels/attention_kernels.h"

namespace dcp::kernels {

// All oracle arrays are fp64 in the kernel layouts: q, o, dout, dq [q_tokens][q_heads][head_dim];
// k, v, dk, dv [kv_tokens][kv_heads][head_dim]; lse, delta [q_heads][q_tokens]. `params` gives
// the shape and softmax_scale (its storage type is ignored); `mask` covers the whole
// q_tokens x kv_tokens problem. Every row takes a full (not online) softmax over its unmasked
// keys; the products go through cblas_dgemm on chunks of rows, so whole sequences of several
// thousand tokens stay fast enough to serve as the dense oracle.

// o = softmax(scale q k^T restricted to the mask) v and lse = log sum exp(s) (natural log), both
// overwritten. A row without unmasked keys gets o = 0 and lse = -inf.
void reference_forward(const AttentionParams& params, std::int32_t q_tokens, std::int32_t kv_tokens,
                       const double* q, const double* k, const double* v, TileMaskView mask,
                       double* o, double* lse);

// delta[h][t] = sum over d of o[t][h][d] * dout[t][h][d].
void reference_delta(std::int32_t tokens, std::int32_t heads, std::int32_t head_dim,
                     const double* o, const double* dout, double* delta);

// Gradients of one block pair from the row's final lse and delta (taken, not recomputed, so the
// same function serves one tile of a longer row): P = exp(s - lse) on unmasked keys (0 elsewhere
// and where lse = -inf), dv = P^T dout, dS = P * (dout v^T - delta), dq = scale dS k,
// dk = scale dS^T q, summed over the q heads of each kv head's group. dq, dk and dv are
// overwritten (zeros where nothing contributes).
void reference_backward(const AttentionParams& params, std::int32_t q_tokens,
                        std::int32_t kv_tokens, const double* q, const double* k, const double* v,
                        TileMaskView mask, const double* dout, const double* lse,
                        const double* delta, double* dq, double* dk, double* dv);

// The kernel set on the oracle: converts the storage-type inputs to fp64, concatenates a row's
// tiles into one kv block (shifting their masks) and calls the functions above, on one thread.
// Partials merge and accumulate in fp64 before rounding to the fp32 outputs.
class ReferenceKernels final : public AttentionKernels {
 public:
  ReferenceKernels();
  std::string_view name() const override { return "reference"; }

  void forward(const AttentionParams& params, std::span<const ForwardRow> rows) override;
  void backward(const AttentionParams& params, std::span<const BackwardRow> rows) override;
  void merge(float* o_dst, float* lse_dst, const float* o_src, const float* lse_src,
             std::int32_t tokens, std::int32_t heads, std::int32_t head_dim) override;
  void add(float* dst, const float* src, std::size_t n) override;
  void delta(ElementType storage, const void* o, const void* dout, std::int32_t tokens,
             std::int32_t heads, std::int32_t head_dim, float* delta) override;
};

}  // namespace dcp::kernels
