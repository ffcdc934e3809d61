// SPDX-License-Identifier: Apache-2.0
// The Communicator interface: point-to-point byte transfers between the ranks of one job, started
// in groups and waited for with a deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "dcp/core/error.h"

namespace dcp::comm {

// A peer failed, stopped answering within the timeout, or a transfer did not match (sizes). The
// message names the rank(s) and what was being waited for. Once thrown, the communicator is
// unusable.
class CommError : public Error {
 public:
  using Error::Error;
};

struct CommOptions {
  // How long a wait may block before the job is declared stuck.
  double timeout_seconds = 60;
};

struct TransferOp {
  enum class Kind : std::uint8_t { kSend, kRecv };
  Kind kind = Kind::kSend;
  std::int32_t peer = 0;
  void* data = nullptr;  // read for a send, written for a receive
  std::size_t bytes = 0;
  // Where `data` lies in the caller's own terms: byte `offset` into its buffer number `buffer`
  // (-1: not named). A communicator that moves slices of buffers it holds rather than raw memory
  // (dcp.torch's transport over tensors) reads these; the others read data.
  std::int32_t buffer = -1;
  std::int64_t offset = 0;
};

using GroupId = std::int64_t;

// Contract:
// - Messages between an ordered pair (a, b) match in issue order: the n-th send from a to b is the
//   n-th receive on b from a, whatever group each belongs to. A receive's size must equal the
//   matching send's, else the receiving side fails with CommError and its buffer is not written
//   (local fails the sender too; with mpi the send may complete, and the sender learns of the
//   failure when the receiver aborts the job).
// - start() returns at once; a send's memory must not change and a receive's memory must not be
//   touched until wait() on its group has returned. Groups complete in any order, but wait(g)
//   returns only when every operation of g is complete.
// - wait() throws CommError if the group is not complete within CommOptions::timeout_seconds, or
//   as soon as another rank has called abort() or failed; it never hangs. After a CommError the
//   caller must abort() (the local backend has already failed the whole world), since other
//   started groups may still be in flight. wait() on an unknown or already waited group throws
//   Error.
// - A rank may send to itself.
// Implementations: local/ (ranks are threads of one process), mpi/ (ranks are MPI processes).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string_view name() const = 0;
  virtual std::int32_t rank() const = 0;
  virtual std::int32_t size() const = 0;

  virtual GroupId start(std::span<const TransferOp> ops) = 0;
  virtual void wait(GroupId group) = 0;
  // Every rank enters before any leaves; throws CommError like wait().
  virtual void barrier() = 0;
  // Tells every other rank that this one failed, with a one-line reason; their pending and later
  // waits throw CommError naming this rank and the reason. Does not return for mpi (the job is
  // aborted); returns for local.
  virtual void abort(std::string_view reason) noexcept = 0;
};

}  // namespace dcp::comm
