// SPDX-License-Identifier: Apache-2.0
// The local Communicator: the ranks are threads of one process that exchange bytes by memcpy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dcp/comm/communicator.h"

namespace dcp::comm {

namespace detail {
struct LocalWorldState;
}  // namespace detail

// The shared state of `size` ranks living in one process; communicator(r) is rank r's end.
//
// Matching: per ordered pair (a, b), the n-th send a -> b meets the n-th receive on b from a, in
// the order the operations were started. Whichever side is started second copies the bytes
// straight from the send buffer into the receive buffer (no staging copy) and completes both
// operations, so no progress thread is needed and wait() only sleeps on a condition variable.
// A size mismatch fails both operations with a CommError that names both ranks and both sizes.
//
// Failure: the first failure of any rank fails the whole world, after which every pending and
// later wait() or barrier() of every rank throws CommError("rank R failed: <reason>") and start()
// throws too. A rank fails when it calls abort(reason), when one of its waits times out (reason:
// the timeout message) or sees a size mismatch. Once the world has failed no further bytes are
// copied, and a wait() that throws first lets copies already under way finish, so receive buffers
// are not written after the wait that owns them has thrown.
//
// Thread safety: each communicator(r) is used by one thread at a time (its rank's thread);
// different ranks may be used concurrently. The world must outlive every use of its communicators.
class LocalWorld {
 public:
  // Throws InvalidInput if size < 1 or the timeout is not a positive number of seconds.
  explicit LocalWorld(std::int32_t size, CommOptions options = {});
  ~LocalWorld();
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;
  LocalWorld(LocalWorld&&) = delete;
  LocalWorld& operator=(LocalWorld&&) = delete;

  std::int32_t size() const;
  const CommOptions& options() const;

  // Rank `rank`'s communicator (name "local"). Throws InvalidInput if rank is outside [0, size).
  Communicator& communicator(std::int32_t rank);

  // Whether some rank has failed, which rank failed first (-1 if none) and the message every
  // wait now throws ("rank R failed: <reason>"; empty if none).
  bool failed() const;
  std::int32_t failed_rank() const;
  std::string failure() const;

 private:
  std::unique_ptr<detail::LocalWorldState> state_;
};

// Runs body(communicator of rank r) on `size` threads, one per rank, of a fresh LocalWorld with
// these options, and returns when every thread has ended.
//
// If a rank's body throws, the world is aborted on that rank's behalf with the exception's message,
// so the other ranks' waits throw promptly instead of timing out. After joining every thread,
// run_local_ranks rethrows the root cause: the exception of the rank that failed the world first
// (keeping its dynamic type, e.g. InvalidInput stays InvalidInput), or if that rank did not throw
// (it called abort() and returned) the first exception any rank threw. If no rank threw but a rank
// called abort(), it throws CommError with the failure. It never leaves a thread running.
// Throws InvalidInput for a size below 1 or an invalid timeout.
void run_local_ranks(std::int32_t size, const CommOptions& options,
                     const std::function<void(Communicator&)>& body);

}  // namespace dcp::comm
