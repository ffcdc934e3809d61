// SPDX-License-Identifier: Apache-2.0
// The MPI Communicator: each rank is one MPI process; transfers are nonblocking MPI messages.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "dcp/comm/communicator.h"

namespace dcp::comm {

// Initialises MPI for the lifetime of the object (MPI_Init_thread asking for
// MPI_THREAD_SERIALIZED: MPI may be called from any one thread at a time) and finalises it in the
// destructor. At most one MpiSession may ever exist in a process, since MPI cannot be initialised
// twice. Every MpiCommunicator must be destroyed before its session.
//
// It also installs a SIGTERM handler that writes "dcp: rank r terminated: another rank of the job
// failed" to stderr and exits with status 1: mpirun sends SIGTERM to the surviving ranks when one
// rank dies, and this turns that into one clear line. The previous handler is restored on
// destruction.
//
// Throws CommError if MPI cannot be initialised with the needed thread level, and Error if a
// session already existed in this process.
class MpiSession {
 public:
  MpiSession();                           // MPI_Init_thread(nullptr, nullptr, ...)
  MpiSession(int& argc, char**& argv);  // lets MPI see (and strip) its command-line arguments
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  MpiSession(MpiSession&&) = delete;
  MpiSession& operator=(MpiSession&&) = delete;

  std::int32_t world_rank() const { return rank_; }
  std::int32_t world_size() const { return size_; }

 private:
  void init(int* argc, char*** argv);

  std::int32_t rank_ = 0;
  std::int32_t size_ = 1;
};

// A Communicator over a private duplicate of MPI_COMM_WORLD whose errors are returned, not fatal.
//
// start() posts one MPI_Isend / MPI_Irecv per operation (one message per transfer, so MPI's
// non-overtaking rule gives the contract's pairwise order); a transfer above max_block_bytes (by
// default INT_MAX, MPI's count limit) is still one message, described by a derived datatype made
// of max_block_bytes-sized blocks plus a remainder, so order and size checks stay exact.
// wait() and barrier() poll (MPI_Testsome, MPI_Test on an MPI_Ibarrier) with a short backoff until
// the deadline. A receive whose size differs from its send throws CommError naming the peer and
// the sizes: a smaller send by its size, a larger one as "more than" the receive (MPI truncates
// and cannot tell the sender's size). The sending side of such a pair completes normally; it learns
// of the failure when the receiving rank aborts the job.
//
// After a CommError, call abort(e.what()): the communicator is unusable (later calls throw), and
// MPI cannot be finalised cleanly while other ranks wait for this one.
//
// All calls must come from one thread at a time (MPI_THREAD_SERIALIZED).
class MpiCommunicator final : public Communicator {
 public:
  static constexpr std::size_t kDefaultMaxBlockBytes = INT_MAX;

  // Collective over MPI_COMM_WORLD (it duplicates the communicator). max_block_bytes must be in
  // [1, INT_MAX]; tests lower it to exercise the multi-block messages with small buffers.
  // Throws InvalidInput for bad options, CommError if MPI fails.
  explicit MpiCommunicator(const MpiSession& session, CommOptions options = {},
                           std::size_t max_block_bytes = kDefaultMaxBlockBytes);
  // Releases requests still pending (pending receives are cancelled) and the duplicate
  // communicator.
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  MpiCommunicator(MpiCommunicator&&) = delete;
  MpiCommunicator& operator=(MpiCommunicator&&) = delete;

  std::string_view name() const override { return "mpi"; }
  std::int32_t rank() const override;
  std::int32_t size() const override;

  GroupId start(std::span<const TransferOp> ops) override;
  void wait(GroupId group) override;
  void barrier() override;
  // Writes "dcp: rank r: <reason>" to stderr and calls MPI_Abort(..., 1); does not return.
  void abort(std::string_view reason) noexcept override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dcp::comm
