// SPDX-License-Identifier: Apache-2.0
// Tests of the communicator backend names and of mpi_available().
#include "dcp/comm/comm_kind.h"

#include <string>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

namespace dcp::comm {
namespace {

TEST(CommKindTest, NamesRoundTrip) {
  for (const CommKind kind : {CommKind::kLocal, CommKind::kMpi}) {
    EXPECT_EQ(parse_comm_kind(to_string(kind)), kind);
  }
  EXPECT_EQ(to_string(CommKind::kLocal), "local");
  EXPECT_EQ(to_string(CommKind::kMpi), "mpi");
}

TEST(CommKindTest, UnknownNameIsInvalidInputNamingTheText) {
  try {
    parse_comm_kind("nccl");
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "unknown communicator 'nccl' (known: local, mpi)");
  }
  EXPECT_THROW(parse_comm_kind("MPI"), InvalidInput);
  EXPECT_THROW(parse_comm_kind(""), InvalidInput);
}

TEST(CommKindTest, MpiIsAvailableExactlyWhenTheBuildHasIt) {
  // DCP_COMM_TEST_WITH_MPI comes from tests/comm/CMakeLists.txt, from the DCP_WITH_MPI switch.
  EXPECT_EQ(mpi_available(), DCP_COMM_TEST_WITH_MPI != 0);
}

}  // namespace
}  // namespace dcp::comm
