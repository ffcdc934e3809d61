// SPDX-License-Identifier: Apache-2.0
// A whole batch's attention tensors in packed layout, and moving them to and from ranks' local
// tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dcp/core/ids.h"

#include "dcp/kernels/attention_kernels.h"
#include "dcp/runtime/local_layout.h"

namespace dcp::runtime {

// Packed layout over the batch (sequence after sequence, as SequenceBatch packs them):
//   q, o, do, dq   [tokens][q_heads][head_dim]    storage type
//   k, v, dk, dv   [tokens][kv_heads][head_dim]   storage type
//   lse            [q_heads][tokens]              fp32
struct BatchShape {
  std::int64_t tokens = 0;
  std::int32_t q_heads = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  kernels::ElementType storage = kernels::ElementType::kFp32;

  std::size_t q_elements() const;
  std::size_t kv_elements() const;
  std::size_t q_bytes() const { return q_elements() * kernels::element_size(storage); }
  std::size_t kv_bytes() const { return kv_elements() * kernels::element_size(storage); }
};

struct BatchInputs {
  BatchShape shape;
  std::vector<std::byte> q, k, v, dout;
};

struct BatchOutputs {
  std::vector<std::byte> o;
  std::vector<float> lse;
  std::vector<std::byte> dq, dk, dv;
};

// Deterministic inputs: entries uniform with unit variance, rounded to the storage type.
BatchInputs random_inputs(const BatchShape& shape, std::uint64_t seed);

// Outputs of the right sizes: o, dq, dk, dv zero and lse -inf.
BatchOutputs empty_outputs(const BatchShape& shape);

// The packed token of each local token block: sequence_offsets[seq] + block.begin.
// `sequence_offsets` has one entry per sequence (SequenceBatch::offset).
struct LocalTensors {
  std::vector<std::byte> q, k, v, dout;
};
LocalTensors gather_local_inputs(const BatchInputs& batch, const LocalLayout& layout,
                                 std::span<const TokenCount> sequence_offsets);

// The batch position (packed order) of each local token of `layout`: one batch-wide token tensor
// indexed by it gives the rank's local tensor. Throws InvalidInput like gather_local_inputs for a
// block outside the batch.
std::vector<std::int64_t> local_token_positions(const LocalLayout& layout,
                                                std::span<const TokenCount> sequence_offsets,
                                                std::int64_t batch_tokens);

// The lengths of the sequences a plan covers: the tokens of the blocks every device owns, summed
// per sequence. Throws InvalidInput if the owned blocks of a sequence do not tile it exactly.
std::vector<TokenCount> plan_sequence_lengths(const Plan& plan);

// Writes one rank's local outputs into the batch's.
void scatter_local_outputs(const BatchShape& shape, const LocalLayout& layout,
                           std::span<const TokenCount> sequence_offsets,
                           std::span<const std::byte> o, std::span<const float> lse,
                           std::span<const std::byte> dq, std::span<const std::byte> dk,
                           std::span<const std::byte> dv, BatchOutputs& batch);

// Values as doubles, for comparing with the fp64 reference.
std::vector<double> to_doubles(kernels::ElementType type, std::span<const std::byte> data);

}  // namespace dcp::runtime
