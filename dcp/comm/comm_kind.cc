// SPDX-License-Identifier: Apache-2.0
// Names of the communicator backends and the compile-time answer to "is MPI built in".
#include "dcp/comm/comm_kind.h"

#include <string>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

namespace dcp::comm {

std::string_view to_string(CommKind kind) {
  switch (kind) {
    case CommKind::kLocal:
      return "local";
    case CommKind::kMpi:
      return "mpi";
  }
  throw Error("unknown CommKind " + std::to_string(static_cast<int>(kind)));
}

CommKind parse_comm_kind(std::string_view name) {
  if (name == "local") return CommKind::kLocal;
  if (name == "mpi") return CommKind::kMpi;
  throw InvalidInput("unknown communicator " + quoted(name) + " (known: local, mpi)");
}

bool mpi_available() {
  // DCP_COMM_MPI_BUILT is set for this file by dcp/comm/CMakeLists.txt exactly when it also
  // builds dcp_comm_mpi.
#if defined(DCP_COMM_MPI_BUILT) && DCP_COMM_MPI_BUILT
  return true;
#else
  return false;
#endif
}

}  // namespace dcp::comm
