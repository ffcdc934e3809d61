// SPDX-License-Identifier: Apache-2.0
// Runs a plan's forward and backward passes over a whole batch on every rank of a communicator,
// and gathers the outputs and each rank's profile on rank 0.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcp/comm/communicator.h"
#include "dcp/kernels/attention_kernels.h"
#include "dcp/program/program.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/executor.h"

namespace dcp::runtime {

struct RunOptions {
  kernels::KernelKind kernels = kernels::KernelKind::kCpu;
  // Kernel threads per rank; 0 picks hardware threads / ranks in this process (at least 1).
  std::int32_t kernel_threads = 0;
  comm::CommOptions comm;
};

struct RunResult {
  BatchOutputs outputs;               // the whole batch's, on rank 0
  std::vector<PassProfile> forward;   // per rank, on rank 0
  std::vector<PassProfile> backward;  // per rank, on rank 0
  // The slowest rank's pass time, each pass started together after a barrier.
  double forward_seconds = 0;
  double backward_seconds = 0;
};

// Every rank calls this with the same plan and inputs (`sequence_offsets`: each sequence's first
// packed token). Each rank executes its Programs on its part of the inputs; rank 0 returns the
// gathered outputs and profiles, the other ranks an empty result. Throws InvalidInput if the plan
// does not fit the communicator or the inputs, comm::CommError if a peer fails.
RunResult run_plan(comm::Communicator& communicator, const Plan& plan,
                   std::span<const TokenCount> sequence_offsets, const BatchInputs& inputs,
                   const RunOptions& options);

// The same with every rank a thread of this process (the local communicator).
RunResult run_plan_locally(const Plan& plan, std::span<const TokenCount> sequence_offsets,
                           const BatchInputs& inputs, const RunOptions& options);

}  // namespace dcp::runtime
