// SPDX-License-Identifier: Apache-2.0
// What the executing commands (run, attention, demo) share: runtime flags, running a plan on local
// or MPI ranks, and reporting errors against the dense reference.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "dcp/model/sequence_batch.h"

#include "dcp/comm/comm_kind.h"
#include "dcp/comm/communicator.h"
#include "dcp/kernels/attention_kernels.h"
#include "dcp/program/program.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/dense_reference.h"
#include "dcp/runtime/distributed_run.h"

#include "apps/cli/args.h"

namespace dcp::cli {

// --comm, --kernels, --threads, --timeout.
const std::vector<FlagSpec>& execution_flags();

struct ExecutionOptions {
  comm::CommKind comm = comm::CommKind::kLocal;
  runtime::RunOptions run;
};
ExecutionOptions execution_options_from_flags(const Args& args);

// Runs `body` with this process's communicator for `options.comm`: nullptr for local (the body
// then runs the plan on local ranks), else the MPI communicator of the job. For MPI, an exception
// on any rank aborts the whole job with its message (exit 1), so no rank waits for a dead one.
// Returns whether this process is the one that reports (rank 0, or the local process).
bool with_communicator(const ExecutionOptions& options,
                       const std::function<void(comm::Communicator*)>& body);

// Runs the plan on local ranks (communicator == nullptr) or on this MPI rank.
runtime::RunResult execute_plan(comm::Communicator* communicator, const Plan& plan,
                                const SequenceBatch& batch, const runtime::BatchInputs& inputs,
                                const runtime::RunOptions& options);

// The largest relative error (max |out - ref| / max |ref|, per tensor) a correct run may show for
// a storage type: fp32 1e-4, fp16 5e-3, bf16 3e-2 (docs/runtime.md).
double error_bound(kernels::ElementType storage);

// Prints one line per tensor (o, lse, dq, dk, dv): max abs error, max |reference|, relative.
void print_errors(std::ostream& out, const runtime::OutputErrors& errors);

// Throws Error naming the worst tensor if the errors exceed error_bound, or any value is NaN or
// infinite, or an lse is -inf on one side only.
void check_errors(const runtime::OutputErrors& errors, kernels::ElementType storage);

}  // namespace dcp::cli
