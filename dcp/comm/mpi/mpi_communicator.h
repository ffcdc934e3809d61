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
  MpiSession();                         // MPI_Init_thread(nullptr, nullptr, ...)
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
// Every transfer is one MPI message with one tag, so MPI's non-overtaking rule gives the contract's
// pairwise order. start() posts the sends (MPI_Isend). Receives are matched in issue order per
// peer while wait() or barrier() polls: MPI_Improbe finds the next message from the peer, its size
// is compared with the receive's, and only an equal-sized message is received (MPI_Imrecv). A size
// mismatch therefore throws CommError naming both ranks and both sizes, and MPI never truncates:
// Open MPI 4.1 writes past the receive buffer, or hangs, when a message above its eager limit is
// truncated. A transfer above max_block_bytes (by default INT_MAX, MPI's count limit) is still one
// message, described by a derived datatype of max_block_bytes-sized blocks plus a remainder.
// wait() and barrier() (MPI_Ibarrier) poll with a short backoff until the deadline, then throw
// CommError naming the operations still pending.
//
// The sending side of a mismatched pair is not told by MPI; it learns of the failure when the
// receiving rank calls abort(). After any CommError, call abort(e.what()): the communicator is
// unusable (later calls throw), and MPI cannot be finalised cleanly while other ranks wait for
// this one.
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
  // Releases the requests still pending (after an error; receives not yet matched are dropped)
  // and the duplicate communicator. Collective in principle, like MPI_Comm_free.
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
