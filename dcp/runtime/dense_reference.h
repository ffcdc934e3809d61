// SPDX-License-Identifier: Apache-2.0
// The dense fp64 oracle over a whole batch, and how far a run's outputs are from it.
#pragma once

#include <cstdint>
#include <vector>

#include "dcp/model/workload.h"

#include "dcp/runtime/batch_tensors.h"

namespace dcp::runtime {

// The packed tensors' shape for a workload's batch and attention shape.
BatchShape batch_shape_of(const Workload& workload);

// A sequence's mask as per-row key intervals over the whole sequence (kernels::TileMaskView form).
struct SequenceIntervals {
  std::vector<std::int32_t> row_offsets;  // length + 1
  std::vector<std::int32_t> intervals;    // (begin, end) pairs
};
SequenceIntervals sequence_intervals(const SequenceMask& mask);

// Forward and backward of every sequence of the batch as one fp64 attention problem over its
// whole mask (no blocks, no partials), in the packed layouts of BatchOutputs. delta is taken
// from the fp64 o.
struct DenseReference {
  std::vector<double> o, lse, dq, dk, dv;
};

// `threads` sequences at a time. Throws InvalidInput if the inputs do not match the workload's
// batch and attention shape.
DenseReference dense_reference(const Workload& workload, const BatchInputs& inputs,
                               double softmax_scale, std::int32_t threads);

struct TensorError {
  double max_abs = 0;        // max |output - reference|
  double max_reference = 0;  // max |reference|
  double relative() const { return max_reference > 0 ? max_abs / max_reference : max_abs; }
};

struct OutputErrors {
  TensorError o, lse, dq, dk, dv;  // lse over its finite entries
  // lse entries where exactly one side is -inf, and outputs that are NaN or infinite
  // (lse = -inf excepted): both must be 0.
  std::int64_t lse_mismatches = 0;
  std::int64_t non_finite = 0;

  double worst_relative() const;
};

OutputErrors compare_outputs(const BatchShape& shape, const BatchOutputs& outputs,
                             const DenseReference& reference);

}  // namespace dcp::runtime
