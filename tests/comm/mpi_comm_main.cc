// SPDX-License-Identifier: Apache-2.0
// The MPI communicator's test program, run under mpirun: the shared contract checks plus MPI-only
// ones ("checks"), and two fault scenarios whose exit status and stderr ctest inspects.
//
// Usage: dcp_comm_mpi_test checks
//        dcp_comm_mpi_test kill VICTIM   (VICTIM raises SIGKILL in the middle of an exchange)
//        dcp_comm_mpi_test hang VICTIM   (VICTIM sleeps far longer than the 2 s timeout)
// "checks" exits 0 when every check passed on every rank; any failure aborts the job (non-zero).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dcp/core/error.h"
#include "dcp/core/parse.h"

#include "dcp/comm/comm_kind.h"
#include "dcp/comm/mpi/mpi_communicator.h"

#include "tests/comm/comm_checks.h"
#include <signal.h>

namespace dcp::comm {
namespace {

using testing::check;
using testing::CheckFailed;

// A receive whose size differs from its send fails on the receiving rank with both ranks and both
// sizes in the message, smaller or larger, below or above MPI's eager limits, in plain and
// multi-block messages; the communicator is unusable afterwards. The sender does not wait: a large
// send is never received. Each case uses a fresh communicator whose destructor frees the send.
void check_size_mismatch(const MpiSession& session, Communicator& world, std::size_t send_bytes,
                         std::size_t recv_bytes, std::size_t block) {
  {
    MpiCommunicator comm(session, {}, block);
    const std::int32_t sender = 0;
    const std::int32_t receiver = comm.size() - 1;
    std::vector<std::uint8_t> out(send_bytes, 1);
    std::vector<std::uint8_t> in(recv_bytes);
    std::vector<TransferOp> ops;
    if (comm.rank() == sender) ops.push_back(testing::send_op(receiver, out));
    if (comm.rank() == receiver) ops.push_back(testing::recv_op(sender, in));
    const GroupId group = comm.start(ops);
    if (comm.rank() == receiver) {
      const std::string case_name =
          "mismatch " + std::to_string(send_bytes) + " -> " + std::to_string(recv_bytes);
      const std::string expected =
          "rank " + std::to_string(receiver) + ": group 0: size mismatch: rank 0 sends " +
          std::to_string(send_bytes) + " bytes to rank " + std::to_string(receiver) +
          ", which receives " + std::to_string(recv_bytes) + " bytes";
      try {
        comm.wait(group);
        throw CheckFailed(case_name + ": the receive did not fail");
      } catch (const CommError& e) {
        check(e.what() == expected, case_name + ": unexpected message: " + e.what());
      }
      bool unusable = false;
      try {
        comm.start({});
      } catch (const CommError&) {
        unusable = true;
      }
      check(unusable, case_name + ": the communicator stayed usable after the error");
      check(std::all_of(in.begin(), in.end(), [](std::uint8_t byte) { return byte == 0; }),
            case_name + ": the receive buffer was written");
    }
    world.barrier();
  }
  world.barrier();
}

// A receive nobody sends times out naming the peer; the pending receive is cancelled when the
// communicator is destroyed.
void check_wait_timeout(const MpiSession& session, Communicator& world) {
  CommOptions options;
  options.timeout_seconds = 0.2;
  MpiCommunicator comm(session, options);
  if (comm.rank() == 0) {
    const std::int32_t silent = comm.size() - 1;
    std::vector<std::uint8_t> in(64);
    const TransferOp op = testing::recv_op(silent, in);
    try {
      comm.wait(comm.start({&op, 1}));
      throw CheckFailed("a receive nobody sends did not time out");
    } catch (const CommError& e) {
      const std::string expected =
          "rank 0: timed out after 0.2 s waiting for group 0: receive from rank " +
          std::to_string(silent) + " (64 bytes)";
      check(e.what() == expected, std::string("unexpected timeout message: ") + e.what());
    }
  }
  world.barrier();
}

// A barrier that another rank enters only later times out; the late ranks still get through it
// (the abandoned barrier keeps progressing on rank 0).
void check_barrier_timeout(const MpiSession& session, Communicator& world) {
  CommOptions options;
  options.timeout_seconds = 0.2;
  MpiCommunicator comm(session, options);
  if (comm.size() == 1) {
    comm.barrier();
  } else if (comm.rank() == 0) {
    try {
      comm.barrier();
      throw CheckFailed("a barrier the other ranks had not entered did not time out");
    } catch (const CommError& e) {
      check(std::string(e.what()) ==
                "rank 0: timed out after 0.2 s in barrier 1: some rank has not entered it",
            std::string("unexpected barrier timeout message: ") + e.what());
    }
    world.barrier();
  } else {
    world.barrier();
    comm.barrier();
  }
  world.barrier();
}

int run_checks(const MpiSession& session) {
  MpiCommunicator world(session);
  try {
    check(world.name() == "mpi", "name");
    check(world.size() == session.world_size() && world.rank() == session.world_rank(),
          "rank and size");
    check(mpi_available(), "mpi_available() is false in a build with the MPI backend");
    testing::run_all_checks(world);
    {
      // Every message above 1000 bytes becomes one multi-block datatype message.
      MpiCommunicator small_blocks(session, {}, 1000);
      testing::run_all_checks(small_blocks);
    }
    constexpr std::size_t kPlain = MpiCommunicator::kDefaultMaxBlockBytes;
    check_size_mismatch(session, world, 8, 16, kPlain);
    check_size_mismatch(session, world, 32, 16, kPlain);
    check_size_mismatch(session, world, 0, 16, kPlain);
    check_size_mismatch(session, world, 1 << 20, 1 << 19, kPlain);  // above the eager limits
    check_size_mismatch(session, world, 2500, 3000, 1000);
    check_size_mismatch(session, world, 3000, 2500, 1000);
    check_wait_timeout(session, world);
    check_barrier_timeout(session, world);
    world.barrier();
  } catch (const std::exception& e) {
    world.abort(std::string("check failed: ") + e.what());
  }
  if (world.rank() == 0) std::printf("mpi checks passed on %d ranks\n", world.size());
  return 0;
}

// Every rank exchanges 4 KiB with every other rank, 50 times; at iteration 3 the victim either
// kills itself or stops answering. The survivors must not hang: the job has to end non-zero.
int run_fault(const MpiSession& session, std::string_view mode, std::int32_t victim) {
  CommOptions options;
  options.timeout_seconds = mode == "kill" ? 5 : 2;
  MpiCommunicator comm(session, options);
  try {
    constexpr std::size_t kBytes = 4096;
    for (std::int64_t iteration = 0; iteration < 50; ++iteration) {
      if (comm.rank() == victim && iteration == 3) {
        if (mode == "kill") {
          raise(SIGKILL);
        } else {
          std::this_thread::sleep_for(std::chrono::seconds(120));
        }
      }
      std::vector<std::vector<std::uint8_t>> buffers;
      buffers.reserve(2 * static_cast<std::size_t>(comm.size()));
      std::vector<TransferOp> ops;
      for (std::int32_t peer = 0; peer < comm.size(); ++peer) {
        if (peer == comm.rank()) continue;
        buffers.emplace_back(kBytes);
        ops.push_back(testing::recv_op(peer, buffers.back()));
      }
      for (std::int32_t peer = 0; peer < comm.size(); ++peer) {
        if (peer == comm.rank()) continue;
        buffers.push_back(testing::make_message(comm.rank(), peer, iteration, kBytes));
        ops.push_back(testing::send_op(peer, buffers.back()));
      }
      comm.wait(comm.start(ops));
    }
  } catch (const std::exception& e) {
    comm.abort(e.what());
  }
  std::fprintf(stderr, "dcp: rank %d: the %s fault went unnoticed\n", comm.rank(),
               std::string(mode).c_str());
  return 3;
}

int usage() {
  std::fprintf(stderr, "usage: dcp_comm_mpi_test checks | kill VICTIM | hang VICTIM\n");
  return 2;
}

}  // namespace
}  // namespace dcp::comm

int main(int argc, char** argv) {
  using namespace dcp::comm;
  try {
    MpiSession session(argc, argv);
    const std::string_view mode = argc > 1 ? argv[1] : "";
    if (mode == "checks" && argc == 2) return run_checks(session);
    if ((mode == "kill" || mode == "hang") && argc == 3) {
      const auto victim = static_cast<std::int32_t>(dcp::parse_int(argv[2], "VICTIM"));
      if (victim < 0 || victim >= session.world_size()) return usage();
      return run_fault(session, mode, victim);
    }
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dcp_comm_mpi_test: %s\n", e.what());
    return 1;
  }
}
