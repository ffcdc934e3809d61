// SPDX-License-Identifier: Apache-2.0
// What the executing commands (run, attention, demo) share: runtime flags, running a plan on local
// or MPI ranks, and reporting errors against the dense reference.
#include "apps/cli/execution.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>

#if defined(DCP_WITH_MPI)
#include "dcp/core/error.h"

#include "dcp/model/sequence_batch.h"

#include "dcp/comm/comm_kind.h"
#include "dcp/comm/communicator.h"
#include "dcp/comm/mpi/mpi_communicator.h"
#include "dcp/kernels/attention_kernels.h"
#include "dcp/program/program.h"
#include "dcp/runtime/batch_tensors.h"
#include "dcp/runtime/dense_reference.h"
#include "dcp/runtime/distributed_run.h"
#endif

namespace dcp::cli {

const std::vector<FlagSpec>& execution_flags() {
  static const std::vector<FlagSpec> specs = {
      {"--comm", "NAME",
       "local (ranks are threads of this process) | mpi (ranks are the processes mpirun "
       "started; their number must equal the plan's devices) [local]"},
      {"--kernels", "NAME", "cpu | reference (fp64, slow) [cpu]"},
      {"--threads", "N", "kernel threads per rank [hardware threads / ranks, at least 1]"},
      {"--timeout", "SECONDS",
       "a rank waiting longer than this for a peer fails the run with an error [60]"},
  };
  return specs;
}

ExecutionOptions execution_options_from_flags(const Args& args) {
  ExecutionOptions options;
  if (const auto name = args.get("--comm")) {
    options.comm = with_flag("--comm", [&] { return comm::parse_comm_kind(*name); });
    if (options.comm == comm::CommKind::kMpi && !comm::mpi_available()) {
      throw UsageError(
          "--comm mpi: this dcp was built without MPI (install libopenmpi-dev and "
          "reconfigure with -DDCP_WITH_MPI=ON)");
    }
  }
  if (const auto name = args.get("--kernels")) {
    options.run.kernels = with_flag("--kernels", [&] { return kernels::parse_kernel_kind(*name); });
  }
  options.run.kernel_threads = static_cast<std::int32_t>(args.get_int("--threads", 0, 1, 1024));
  options.run.comm.timeout_seconds = args.get_double("--timeout", 60.0);
  if (!(options.run.comm.timeout_seconds > 0) || !std::isfinite(options.run.comm.timeout_seconds)) {
    throw UsageError("--timeout " + std::to_string(options.run.comm.timeout_seconds) +
                     ": must be a positive number of seconds");
  }
  return options;
}

bool with_communicator(const ExecutionOptions& options,
                       const std::function<void(comm::Communicator*)>& body) {
  if (options.comm == comm::CommKind::kLocal) {
    body(nullptr);
    return true;
  }
#if defined(DCP_WITH_MPI)
  comm::MpiSession session;
  comm::MpiCommunicator communicator(session, options.run.comm);
  try {
    body(&communicator);
  } catch (const std::exception& error) {
    // Every rank of the job must stop, not only this one: abort tells mpirun to end them all.
    communicator.abort(error.what());
  }
  return communicator.rank() == 0;
#else
  throw UsageError("--comm mpi: this dcp was built without MPI");
#endif
}

runtime::RunResult execute_plan(comm::Communicator* communicator, const Plan& plan,
                                const SequenceBatch& batch, const runtime::BatchInputs& inputs,
                                const runtime::RunOptions& options) {
  if (communicator == nullptr) {
    return runtime::run_plan_locally(plan, batch.offsets(), inputs, options);
  }
  return runtime::run_plan(*communicator, plan, batch.offsets(), inputs, options);
}

namespace {

using NamedError = std::pair<const char*, const runtime::TensorError*>;

std::array<NamedError, 5> named(const runtime::OutputErrors& errors) {
  return {NamedError{"o", &errors.o}, NamedError{"lse", &errors.lse}, NamedError{"dq", &errors.dq},
          NamedError{"dk", &errors.dk}, NamedError{"dv", &errors.dv}};
}

}  // namespace

double error_bound(kernels::ElementType storage) {
  switch (storage) {
    case kernels::ElementType::kFp32:
      return 1e-4;
    case kernels::ElementType::kFp16:
      return 5e-3;
    case kernels::ElementType::kBf16:
      return 3e-2;
  }
  return 0;
}

void print_errors(std::ostream& out, const runtime::OutputErrors& errors) {
  char line[160];
  std::snprintf(line, sizeof(line), "%-8s %14s %14s %12s\n", "tensor", "max abs error", "max |ref|",
                "relative");
  out << line;
  const auto rows = named(errors);
  for (const auto& [name, error] : rows) {
    std::snprintf(line, sizeof(line), "%-8s %14.3e %14.3e %12.3e\n", name, error->max_abs,
                  error->max_reference, error->relative());
    out << line;
  }
}

void check_errors(const runtime::OutputErrors& errors, kernels::ElementType storage) {
  if (errors.non_finite > 0) {
    throw Error(std::to_string(errors.non_finite) + " output values are NaN or infinite");
  }
  if (errors.lse_mismatches > 0) {
    throw Error(std::to_string(errors.lse_mismatches) +
                " lse values are -inf on one side only (a row attends to keys on one side)");
  }
  const double bound = error_bound(storage);
  const auto rows = named(errors);
  for (const auto& [name, error] : rows) {
    if (!(error->relative() <= bound)) {
      char text[200];
      std::snprintf(text, sizeof(text),
                    "%s differs from the fp64 reference: relative error %.3e > %.0e (%s)", name,
                    error->relative(), bound, std::string(kernels::to_string(storage)).c_str());
      throw Error(text);
    }
  }
}

}  // namespace dcp::cli
