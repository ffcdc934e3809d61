// SPDX-License-Identifier: Apache-2.0
// A whole batch's attention tensors in packed layout, and moving them to and from ranks' local
// tensors.
#include "dcp/runtime/batch_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/rng.h"

namespace dcp::runtime {

namespace {

std::vector<std::byte> random_tensor(std::size_t elements, kernels::ElementType type, Rng& rng) {
  // Uniform on [-sqrt(3), sqrt(3)]: unit variance, so scaled scores have the spread of real ones.
  std::vector<float> values(elements);
  for (float& value : values) {
    value = static_cast<float>((2.0 * rng.uniform01() - 1.0) * std::sqrt(3.0));
  }
  std::vector<std::byte> bytes(elements * kernels::element_size(type));
  kernels::from_float(type, values.data(), bytes.data(), elements);
  return bytes;
}

// Calls fn(global_token, local_token, tokens) for each owned block.
template <typename Fn>
void for_each_block(const LocalLayout& layout, std::span<const TokenCount> sequence_offsets,
                    std::int64_t batch_tokens, Fn&& fn) {
  for (std::size_t i = 0; i < layout.blocks.size(); ++i) {
    const BlockInfo& block = layout.blocks[i];
    if (block.seq < 0 || to_size(block.seq) >= sequence_offsets.size()) {
      throw InvalidInput("block " + std::to_string(block.id) + " belongs to sequence " +
                         std::to_string(block.seq) + ", the batch has " +
                         std::to_string(sequence_offsets.size()));
    }
    const std::int64_t global = sequence_offsets[to_size(block.seq)] + block.begin;
    if (global < 0 || global + block.tokens > batch_tokens) {
      throw InvalidInput("block " + std::to_string(block.id) + " (tokens " +
                         std::to_string(global) + ".." + std::to_string(global + block.tokens) +
                         ") lies outside the batch's " + std::to_string(batch_tokens) + " tokens");
    }
    fn(global, layout.offsets[i], block.tokens);
  }
}

void copy_rows(const std::byte* from, std::byte* to, std::int64_t from_token, std::int64_t to_token,
               std::int64_t tokens, std::size_t row_bytes) {
  std::memcpy(to + to_size(to_token) * row_bytes, from + to_size(from_token) * row_bytes,
              to_size(tokens) * row_bytes);
}

}  // namespace

std::size_t BatchShape::q_elements() const {
  return to_size(tokens) * static_cast<std::size_t>(q_heads) * static_cast<std::size_t>(head_dim);
}

std::size_t BatchShape::kv_elements() const {
  return to_size(tokens) * static_cast<std::size_t>(kv_heads) * static_cast<std::size_t>(head_dim);
}

BatchInputs random_inputs(const BatchShape& shape, std::uint64_t seed) {
  BatchInputs inputs;
  inputs.shape = shape;
  Rng rng(seed);
  inputs.q = random_tensor(shape.q_elements(), shape.storage, rng);
  inputs.k = random_tensor(shape.kv_elements(), shape.storage, rng);
  inputs.v = random_tensor(shape.kv_elements(), shape.storage, rng);
  inputs.dout = random_tensor(shape.q_elements(), shape.storage, rng);
  return inputs;
}

BatchOutputs empty_outputs(const BatchShape& shape) {
  BatchOutputs outputs;
  outputs.o.assign(shape.q_bytes(), std::byte{0});
  outputs.lse.assign(to_size(shape.tokens) * static_cast<std::size_t>(shape.q_heads),
                     -std::numeric_limits<float>::infinity());
  outputs.dq.assign(shape.q_bytes(), std::byte{0});
  outputs.dk.assign(shape.kv_bytes(), std::byte{0});
  outputs.dv.assign(shape.kv_bytes(), std::byte{0});
  return outputs;
}

LocalTensors gather_local_inputs(const BatchInputs& batch, const LocalLayout& layout,
                                 std::span<const TokenCount> sequence_offsets) {
  const BatchShape& shape = batch.shape;
  if (shape.q_heads != layout.q_heads || shape.kv_heads != layout.kv_heads ||
      shape.head_dim != layout.head_dim || shape.storage != layout.storage) {
    throw InvalidInput(
        "the inputs have " + std::to_string(shape.q_heads) + " q heads, " +
        std::to_string(shape.kv_heads) + " kv heads, head dim " + std::to_string(shape.head_dim) +
        " in " + std::string(kernels::to_string(shape.storage)) + "; the plan has " +
        std::to_string(layout.q_heads) + ", " + std::to_string(layout.kv_heads) + ", " +
        std::to_string(layout.head_dim) + " in " + std::string(kernels::to_string(layout.storage)));
  }
  LocalTensors local;
  local.q.resize(layout.q_bytes());
  local.dout.resize(layout.q_bytes());
  local.k.resize(layout.kv_bytes());
  local.v.resize(layout.kv_bytes());
  const std::size_t element = kernels::element_size(shape.storage);
  const std::size_t q_row =
      static_cast<std::size_t>(shape.q_heads) * static_cast<std::size_t>(shape.head_dim) * element;
  const std::size_t kv_row =
      static_cast<std::size_t>(shape.kv_heads) * static_cast<std::size_t>(shape.head_dim) * element;
  for_each_block(layout, sequence_offsets, shape.tokens,
                 [&](std::int64_t global, std::int64_t token, std::int64_t tokens) {
                   copy_rows(batch.q.data(), local.q.data(), global, token, tokens, q_row);
                   copy_rows(batch.dout.data(), local.dout.data(), global, token, tokens, q_row);
                   copy_rows(batch.k.data(), local.k.data(), global, token, tokens, kv_row);
                   copy_rows(batch.v.data(), local.v.data(), global, token, tokens, kv_row);
                 });
  return local;
}

std::vector<std::int64_t> local_token_positions(const LocalLayout& layout,
                                                std::span<const TokenCount> sequence_offsets,
                                                std::int64_t batch_tokens) {
  std::vector<std::int64_t> positions(to_size(layout.tokens()));
  for_each_block(layout, sequence_offsets, batch_tokens,
                 [&](std::int64_t global, std::int64_t token, std::int64_t tokens) {
                   for (std::int64_t i = 0; i < tokens; ++i) {
                     positions[to_size(token + i)] = global + i;
                   }
                 });
  return positions;
}

std::vector<TokenCount> plan_sequence_lengths(const Plan& plan) {
  std::vector<std::vector<std::pair<TokenCount, TokenCount>>> spans(
      to_size(std::max(plan.header.sequences, 0)));
  for (const Program& program : plan.forward) {
    for (const BlockId id : program.owned) {
      const auto it = std::lower_bound(
          program.blocks.begin(), program.blocks.end(), id,
          [](const BlockInfo& block, BlockId wanted) { return block.id < wanted; });
      if (it == program.blocks.end() || it->id != id || it->seq < 0 ||
          it->seq >= plan.header.sequences) {
        throw InvalidInput("device " + std::to_string(program.device) + " owns block " +
                           std::to_string(id) + ", which is not a block of the plan's " +
                           std::to_string(plan.header.sequences) + " sequences");
      }
      spans[to_size(it->seq)].emplace_back(it->begin, it->begin + it->tokens);
    }
  }
  std::vector<TokenCount> lengths;
  for (std::size_t seq = 0; seq < spans.size(); ++seq) {
    std::sort(spans[seq].begin(), spans[seq].end());
    TokenCount end = 0;
    for (const auto& [begin, stop] : spans[seq]) {
      if (begin != end) {
        throw InvalidInput("the blocks the devices own leave a gap or overlap in sequence " +
                           std::to_string(seq) + " at token " + std::to_string(end));
      }
      end = stop;
    }
    lengths.push_back(end);
  }
  return lengths;
}

void scatter_local_outputs(const BatchShape& shape, const LocalLayout& layout,
                           std::span<const TokenCount> sequence_offsets,
                           std::span<const std::byte> o, std::span<const float> lse,
                           std::span<const std::byte> dq, std::span<const std::byte> dk,
                           std::span<const std::byte> dv, BatchOutputs& batch) {
  const std::size_t element = kernels::element_size(shape.storage);
  const std::size_t q_row =
      static_cast<std::size_t>(shape.q_heads) * static_cast<std::size_t>(shape.head_dim) * element;
  const std::size_t kv_row =
      static_cast<std::size_t>(shape.kv_heads) * static_cast<std::size_t>(shape.head_dim) * element;
  if (o.size() != layout.q_bytes() || dq.size() != layout.q_bytes() ||
      dk.size() != layout.kv_bytes() || dv.size() != layout.kv_bytes() ||
      lse.size() != layout.lse_elements()) {
    throw Error("local outputs do not match the rank's layout");
  }
  const std::int64_t local_tokens = layout.tokens();
  for_each_block(layout, sequence_offsets, shape.tokens,
                 [&](std::int64_t global, std::int64_t token, std::int64_t tokens) {
                   copy_rows(o.data(), batch.o.data(), token, global, tokens, q_row);
                   copy_rows(dq.data(), batch.dq.data(), token, global, tokens, q_row);
                   copy_rows(dk.data(), batch.dk.data(), token, global, tokens, kv_row);
                   copy_rows(dv.data(), batch.dv.data(), token, global, tokens, kv_row);
                   for (std::int32_t head = 0; head < shape.q_heads; ++head) {
                     std::memcpy(batch.lse.data() + to_size(head * shape.tokens + global),
                                 lse.data() + to_size(head * local_tokens + token),
                                 to_size(tokens) * sizeof(float));
                   }
                 });
}

std::vector<double> to_doubles(kernels::ElementType type, std::span<const std::byte> data) {
  const std::size_t n = data.size() / kernels::element_size(type);
  std::vector<float> values(n);
  kernels::to_float(type, data.data(), values.data(), n);
  return {values.begin(), values.end()};
}

}  // namespace dcp::runtime
