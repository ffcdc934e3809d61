// SPDX-License-Identifier: Apache-2.0
// The dense fp64 oracle over a whole batch, and how far a run's outputs are from it.
#include "dcp/runtime/dense_reference.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "dcp/core/error.h"
#include "dcp/core/ids.h"
#include "dcp/core/thread_pool.h"

#include "dcp/kernels/reference/reference_attention.h"

namespace dcp::runtime {

BatchShape batch_shape_of(const Workload& workload) {
  BatchShape shape;
  shape.tokens = workload.batch().total_tokens();
  shape.q_heads = workload.shape().q_heads;
  shape.kv_heads = workload.shape().kv_heads;
  shape.head_dim = workload.shape().head_dim;
  shape.storage = element_type(workload.shape().dtype);
  return shape;
}

SequenceIntervals sequence_intervals(const SequenceMask& mask) {
  SequenceIntervals out;
  out.row_offsets.push_back(0);
  std::vector<Interval> row;
  for (TokenCount r = 0; r < mask.length(); ++r) {
    mask.row_intervals(r, row);
    for (const Interval& interval : row) {
      out.intervals.push_back(static_cast<std::int32_t>(interval.begin));
      out.intervals.push_back(static_cast<std::int32_t>(interval.end));
    }
    out.row_offsets.push_back(static_cast<std::int32_t>(out.intervals.size() / 2));
  }
  return out;
}

namespace {

void update(TensorError& error, double value, double reference) {
  error.max_abs = std::max(error.max_abs, std::abs(value - reference));
  error.max_reference = std::max(error.max_reference, std::abs(reference));
}

void compare(TensorError& error, std::int64_t& non_finite, const std::vector<double>& values,
             const std::vector<double>& reference) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      ++non_finite;
      continue;
    }
    update(error, values[i], reference[i]);
  }
}

}  // namespace

double OutputErrors::worst_relative() const {
  return std::max({o.relative(), lse.relative(), dq.relative(), dk.relative(), dv.relative()});
}

DenseReference dense_reference(const Workload& workload, const BatchInputs& inputs,
                               double softmax_scale, std::int32_t threads) {
  const BatchShape& shape = inputs.shape;
  const AttentionShape& attention = workload.shape();
  const SequenceBatch& batch = workload.batch();
  if (shape.tokens != batch.total_tokens() || shape.q_heads != attention.q_heads ||
      shape.kv_heads != attention.kv_heads || shape.head_dim != attention.head_dim) {
    throw InvalidInput("the inputs (" + std::to_string(shape.tokens) + " tokens, " +
                       std::to_string(shape.q_heads) + "/" + std::to_string(shape.kv_heads) +
                       " heads, head dim " + std::to_string(shape.head_dim) +
                       ") do not match the batch (" + std::to_string(batch.total_tokens()) +
                       " tokens, " + std::to_string(attention.q_heads) + "/" +
                       std::to_string(attention.kv_heads) + " heads, head dim " +
                       std::to_string(attention.head_dim) + ")");
  }
  const std::vector<double> q = to_doubles(shape.storage, inputs.q);
  const std::vector<double> k = to_doubles(shape.storage, inputs.k);
  const std::vector<double> v = to_doubles(shape.storage, inputs.v);
  const std::vector<double> dout = to_doubles(shape.storage, inputs.dout);
  DenseReference out;
  out.o.assign(shape.q_elements(), 0.0);
  out.dq.assign(shape.q_elements(), 0.0);
  out.dk.assign(shape.kv_elements(), 0.0);
  out.dv.assign(shape.kv_elements(), 0.0);
  out.lse.assign(to_size(shape.tokens) * static_cast<std::size_t>(shape.q_heads), 0.0);

  kernels::AttentionParams params;
  params.q_heads = shape.q_heads;
  params.kv_heads = shape.kv_heads;
  params.head_dim = shape.head_dim;
  params.softmax_scale = static_cast<float>(softmax_scale);
  const auto hq = static_cast<std::size_t>(shape.q_heads);
  const auto hkv = static_cast<std::size_t>(shape.kv_heads);
  const auto d = static_cast<std::size_t>(shape.head_dim);
  ThreadPool pool(std::max(1, threads));
  pool.parallel_for(to_size(batch.size()), [&](std::size_t s, int) {
    const auto seq = static_cast<SeqIndex>(s);
    const auto length = static_cast<std::int32_t>(batch.length(seq));
    if (length == 0) {
      return;
    }
    const std::size_t first = to_size(batch.offset(seq));
    const SequenceIntervals mask = sequence_intervals(workload.mask(seq));
    const kernels::TileMaskView view{mask.row_offsets.data(), mask.intervals.data()};
    const std::size_t rows = static_cast<std::size_t>(length);
    std::vector<double> lse(rows * hq), delta(rows * hq);
    kernels::reference_forward(params, length, length, q.data() + first * hq * d,
                               k.data() + first * hkv * d, v.data() + first * hkv * d, view,
                               out.o.data() + first * hq * d, lse.data());
    kernels::reference_delta(length, shape.q_heads, shape.head_dim, out.o.data() + first * hq * d,
                             dout.data() + first * hq * d, delta.data());
    kernels::reference_backward(params, length, length, q.data() + first * hq * d,
                                k.data() + first * hkv * d, v.data() + first * hkv * d, view,
                                dout.data() + first * hq * d, lse.data(), delta.data(),
                                out.dq.data() + first * hq * d, out.dk.data() + first * hkv * d,
                                out.dv.data() + first * hkv * d);
    for (std::size_t h = 0; h < hq; ++h) {
      std::copy_n(lse.data() + h * rows, rows, out.lse.data() + h * to_size(shape.tokens) + first);
    }
  });
  return out;
}

OutputErrors compare_outputs(const BatchShape& shape, const BatchOutputs& outputs,
                             const DenseReference& reference) {
  OutputErrors errors;
  compare(errors.o, errors.non_finite, to_doubles(shape.storage, outputs.o), reference.o);
  compare(errors.dq, errors.non_finite, to_doubles(shape.storage, outputs.dq), reference.dq);
  compare(errors.dk, errors.non_finite, to_doubles(shape.storage, outputs.dk), reference.dk);
  compare(errors.dv, errors.non_finite, to_doubles(shape.storage, outputs.dv), reference.dv);
  for (std::size_t i = 0; i < outputs.lse.size(); ++i) {
    const double value = outputs.lse[i];
    const double want = reference.lse[i];
    const bool value_empty = std::isinf(value) && value < 0;
    const bool want_empty = std::isinf(want) && want < 0;
    if (value_empty != want_empty) {
      ++errors.lse_mismatches;
    } else if (!value_empty) {
      if (!std::isfinite(value)) {
        ++errors.non_finite;
      } else {
        update(errors.lse, value, want);
      }
    }
  }
  return errors;
}

}  // namespace dcp::runtime
