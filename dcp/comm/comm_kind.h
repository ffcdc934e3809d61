// SPDX-License-Identifier: Apache-2.0
// Which Communicator backend to use, by name, and whether the MPI backend was compiled in.
#pragma once

#include <cstdint>
#include <string_view>

namespace dcp::comm {

// kLocal: the ranks are threads of one process (local/local_communicator.h), always built.
// kMpi: the ranks are MPI processes (mpi/mpi_communicator.h), built when DCP_WITH_MPI is ON.
enum class CommKind : std::uint8_t { kLocal, kMpi };

// The name used on command lines and in result files: "local" or "mpi".
std::string_view to_string(CommKind kind);

// The inverse of to_string. Throws InvalidInput naming the text and the known names.
CommKind parse_comm_kind(std::string_view name);

// True exactly when this build of dcp compiled the MPI backend (the library dcp::comm_mpi exists
// and defines DCP_WITH_MPI=1 for its users). dcp::comm itself never links MPI: the answer is fixed
// at configure time from the same DCP_WITH_MPI switch that decides whether dcp::comm_mpi is built.
// It says nothing about whether the process was started by mpirun.
bool mpi_available();

}  // namespace dcp::comm
