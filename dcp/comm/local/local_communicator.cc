// SPDX-License-Identifier: Apache-2.0
// The local Communicator: matching queues per ordered pair of ranks under one mutex, with the
// second side of each match copying the bytes and a condition variable for waits.
#include "dcp/comm/local/local_communicator.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dcp/core/error.h"

#include "dcp/comm/comm_util.h"

namespace dcp::comm {
namespace {

using Clock = std::chrono::steady_clock;

enum class OpState : std::uint8_t { kQueued, kCopying, kDone, kFailed };

struct Group;

// One started transfer. Lives inside its Group, whose address is stable until the group is
// erased, which happens only after every operation of it has completed.
struct LocalOp {
  TransferOp::Kind kind = TransferOp::Kind::kSend;
  std::int32_t owner = 0;
  std::int32_t peer = 0;
  void* data = nullptr;
  std::size_t bytes = 0;
  OpState state = OpState::kQueued;
  Group* group = nullptr;
};

struct Group {
  GroupId id = 0;
  std::vector<LocalOp> ops;
  std::size_t pending = 0;  // operations neither done nor failed
  std::string error;        // the first failure of one of its operations (a size mismatch)
};

// A matched pair whose bytes the thread that made the match copies outside the lock.
struct Copy {
  LocalOp* send = nullptr;
  LocalOp* recv = nullptr;
};

class LocalCommunicator;

}  // namespace

namespace detail {

// Everything below is guarded by `mutex`, except the constants (size, options, timeout, ranks).
struct LocalWorldState {
  LocalWorldState(std::int32_t world_size, const CommOptions& world_options)
      : size(world_size),
        options(world_options),
        timeout(timeout_duration(world_options)),
        sends(static_cast<std::size_t>(world_size) * static_cast<std::size_t>(world_size)),
        recvs(sends.size()),
        barrier_entries(static_cast<std::size_t>(world_size), 0) {}

  std::size_t pair_index(std::int32_t sender, std::int32_t receiver) const {
    return static_cast<std::size_t>(sender) * static_cast<std::size_t>(size) +
           static_cast<std::size_t>(receiver);
  }

  // Marks the world failed by `rank` unless it already failed; the first failure wins.
  void fail_locked(std::int32_t rank, std::string_view reason) noexcept {
    if (failed) return;
    failed = true;
    failed_rank = rank;
    try {
      failure = "rank " + std::to_string(rank) + " failed: " + std::string(reason);
    } catch (...) {
      failure.clear();  // out of memory: the waits still throw, with an empty message
    }
  }

  // Blocks until no thread is copying bytes any more. Copies are bounded work and no new copy
  // starts once the world has failed, so this returns promptly.
  void wait_for_copies(std::unique_lock<std::mutex>& lock) {
    changed.wait(lock, [this] { return copies_in_flight == 0; });
  }

  const std::int32_t size;
  const CommOptions options;
  const Clock::duration timeout;

  std::mutex mutex;
  std::condition_variable changed;  // any operation completed, a rank failed or entered a barrier
  // Unmatched operations of each ordered pair (sender, receiver), in issue order. At most one of
  // the two queues of a pair is non-empty at any time.
  std::vector<std::deque<LocalOp*>> sends;
  std::vector<std::deque<LocalOp*>> recvs;
  std::vector<std::uint64_t> barrier_entries;  // barriers each rank has entered
  std::size_t copies_in_flight = 0;
  bool failed = false;
  std::int32_t failed_rank = -1;
  std::string failure;

  std::vector<std::unique_ptr<LocalCommunicator>> ranks;
};

}  // namespace detail

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(detail::LocalWorldState& world, std::int32_t rank)
      : world_(world), rank_(rank) {}

  std::string_view name() const override { return "local"; }
  std::int32_t rank() const override { return rank_; }
  std::int32_t size() const override { return world_.size; }

  GroupId start(std::span<const TransferOp> ops) override {
    detail::validate_ops(ops, rank_, world_.size);
    auto group = std::make_unique<Group>();
    group->ops.reserve(ops.size());
    for (const TransferOp& op : ops) {
      group->ops.push_back(
          LocalOp{op.kind, rank_, op.peer, op.data, op.bytes, OpState::kQueued, group.get()});
    }
    group->pending = group->ops.size();
    std::vector<Copy> copies;
    copies.reserve(ops.size());

    GroupId id = 0;
    {
      std::unique_lock lock(world_.mutex);
      if (world_.failed) throw CommError(world_.failure);
      id = next_group_++;
      group->id = id;
      Group& started = *group;
      groups_.emplace(id, std::move(group));
      for (LocalOp& op : started.ops) match_locked(op, copies);
    }
    world_.changed.notify_all();
    if (copies.empty()) return id;

    // The buffers are stable: neither owner can return from a wait on these operations while they
    // are being copied (their groups are incomplete, and failing waits wait for copies_in_flight).
    for (const Copy& copy : copies) std::memcpy(copy.recv->data, copy.send->data, copy.send->bytes);
    {
      std::unique_lock lock(world_.mutex);
      for (const Copy& copy : copies) {
        finish_locked(*copy.send);
        finish_locked(*copy.recv);
      }
      world_.copies_in_flight -= copies.size();
    }
    world_.changed.notify_all();
    return id;
  }

  void wait(GroupId group_id) override {
    std::unique_lock lock(world_.mutex);
    const auto found = groups_.find(group_id);
    if (found == groups_.end()) {
      throw Error("rank " + std::to_string(rank_) + ": wait on group " + std::to_string(group_id) +
                  ", which was never started or was already waited for");
    }
    const Group& group = *found->second;
    const Clock::time_point deadline = Clock::now() + world_.timeout;
    for (;;) {
      if (!group.error.empty()) {
        fail_and_throw(lock, "group " + std::to_string(group_id) + ": " + group.error);
      }
      if (world_.failed) throw_world_failure(lock);
      if (group.pending == 0) {
        groups_.erase(found);
        return;
      }
      if (world_.changed.wait_until(lock, deadline) == std::cv_status::timeout &&
          group.pending > 0 && group.error.empty() && !world_.failed) {
        detail::PendingList pending;
        for (const LocalOp& op : group.ops) {
          if (op.state == OpState::kQueued || op.state == OpState::kCopying) {
            pending.add(detail::describe_op(op.kind, op.peer, op.bytes));
          }
        }
        fail_and_throw(
            lock, "timed out after " + detail::seconds_text(world_.options.timeout_seconds) +
                      " waiting for group " + std::to_string(group_id) + ": " + pending.text());
      }
    }
  }

  void barrier() override {
    std::unique_lock lock(world_.mutex);
    if (world_.failed) throw_world_failure(lock);
    const std::uint64_t target = ++world_.barrier_entries[static_cast<std::size_t>(rank_)];
    world_.changed.notify_all();
    const auto all_entered = [&] {
      for (const std::uint64_t entered : world_.barrier_entries) {
        if (entered < target) return false;
      }
      return true;
    };
    const Clock::time_point deadline = Clock::now() + world_.timeout;
    for (;;) {
      if (world_.failed) throw_world_failure(lock);
      if (all_entered()) return;
      if (world_.changed.wait_until(lock, deadline) == std::cv_status::timeout && !world_.failed &&
          !all_entered()) {
        std::string missing;
        for (std::size_t r = 0; r < world_.barrier_entries.size(); ++r) {
          if (world_.barrier_entries[r] >= target) continue;
          if (!missing.empty()) missing += ", ";
          missing += std::to_string(r);
        }
        fail_and_throw(lock, "timed out after " +
                                 detail::seconds_text(world_.options.timeout_seconds) +
                                 " in barrier " + std::to_string(target) +
                                 ": not entered by rank(s) " + missing);
      }
    }
  }

  void abort(std::string_view reason) noexcept override {
    try {
      const std::lock_guard lock(world_.mutex);
      world_.fail_locked(rank_, reason);
    } catch (...) {
      // Locking failed (system error): nothing sensible is left to do without the lock.
      return;
    }
    world_.changed.notify_all();
  }

 private:
  // Matches `op` with the oldest unmatched counterpart of its pair, or queues it. A match of
  // non-empty buffers is appended to `copies`, for the caller to copy outside the lock.
  void match_locked(LocalOp& op, std::vector<Copy>& copies) {
    const bool is_send = op.kind == TransferOp::Kind::kSend;
    const std::size_t pair =
        is_send ? world_.pair_index(rank_, op.peer) : world_.pair_index(op.peer, rank_);
    std::deque<LocalOp*>& own_queue = is_send ? world_.sends[pair] : world_.recvs[pair];
    std::deque<LocalOp*>& other_queue = is_send ? world_.recvs[pair] : world_.sends[pair];
    if (other_queue.empty()) {
      own_queue.push_back(&op);
      return;
    }
    LocalOp* other = other_queue.front();
    other_queue.pop_front();
    LocalOp& send = is_send ? op : *other;
    LocalOp& recv = is_send ? *other : op;
    if (send.bytes != recv.bytes) {
      const std::string error =
          detail::mismatch_text(send.owner, send.bytes, recv.owner, recv.bytes);
      fail_locked(send, error);
      fail_locked(recv, error);
      return;
    }
    if (send.bytes == 0) {
      finish_locked(send);
      finish_locked(recv);
      return;
    }
    send.state = OpState::kCopying;
    recv.state = OpState::kCopying;
    ++world_.copies_in_flight;
    copies.push_back(Copy{&send, &recv});
  }

  static void finish_locked(LocalOp& op) {
    op.state = OpState::kDone;
    --op.group->pending;
  }

  static void fail_locked(LocalOp& op, const std::string& error) {
    op.state = OpState::kFailed;
    --op.group->pending;
    if (op.group->error.empty()) op.group->error = error;
  }

  // This rank failed (`what` says how): fails the world on its behalf, lets copies finish and
  // throws CommError("rank r: <detail>").
  [[noreturn]] void fail_and_throw(std::unique_lock<std::mutex>& lock, const std::string& what) {
    world_.fail_locked(rank_, what);
    world_.changed.notify_all();
    world_.wait_for_copies(lock);
    throw CommError("rank " + std::to_string(rank_) + ": " + what);
  }

  // The world failed (maybe by this rank): lets copies finish and throws its failure.
  [[noreturn]] void throw_world_failure(std::unique_lock<std::mutex>& lock) {
    world_.wait_for_copies(lock);
    throw CommError(world_.failure);
  }

  detail::LocalWorldState& world_;
  const std::int32_t rank_;
  // Guarded by world_.mutex (matching threads reach the groups through LocalOp::group).
  GroupId next_group_ = 0;
  std::map<GroupId, std::unique_ptr<Group>> groups_;
};

}  // namespace

LocalWorld::LocalWorld(std::int32_t size, CommOptions options) {
  if (size < 1) {
    throw InvalidInput("a local world needs at least 1 rank, got " + std::to_string(size));
  }
  detail::validate_options(options);
  state_ = std::make_unique<detail::LocalWorldState>(size, options);
  state_->ranks.reserve(static_cast<std::size_t>(size));
  for (std::int32_t rank = 0; rank < size; ++rank) {
    state_->ranks.push_back(std::make_unique<LocalCommunicator>(*state_, rank));
  }
}

LocalWorld::~LocalWorld() = default;

std::int32_t LocalWorld::size() const { return state_->size; }

const CommOptions& LocalWorld::options() const { return state_->options; }

Communicator& LocalWorld::communicator(std::int32_t rank) {
  if (rank < 0 || rank >= state_->size) {
    throw InvalidInput("rank " + std::to_string(rank) + " is outside the local world of " +
                       std::to_string(state_->size) + " ranks");
  }
  return *state_->ranks[static_cast<std::size_t>(rank)];
}

bool LocalWorld::failed() const {
  const std::lock_guard lock(state_->mutex);
  return state_->failed;
}

std::int32_t LocalWorld::failed_rank() const {
  const std::lock_guard lock(state_->mutex);
  return state_->failed_rank;
}

std::string LocalWorld::failure() const {
  const std::lock_guard lock(state_->mutex);
  return state_->failure;
}

void run_local_ranks(std::int32_t size, const CommOptions& options,
                     const std::function<void(Communicator&)>& body) {
  LocalWorld world(size, options);
  std::mutex errors_mutex;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::int32_t> error_order;  // ranks in the order their bodies threw
  error_order.reserve(static_cast<std::size_t>(size));

  const auto run_rank = [&](std::int32_t rank) {
    Communicator& comm = world.communicator(rank);
    std::string reason;
    std::exception_ptr error;
    try {
      body(comm);
      return;
    } catch (const std::exception& e) {
      reason = e.what();
      error = std::current_exception();
    } catch (...) {
      reason = "a non-standard exception";
      error = std::current_exception();
    }
    {
      const std::lock_guard lock(errors_mutex);
      errors[static_cast<std::size_t>(rank)] = error;
      error_order.push_back(rank);
    }
    comm.abort(reason);  // no-op if the world already failed
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(size));
  try {
    for (std::int32_t rank = 0; rank < size; ++rank) threads.emplace_back(run_rank, rank);
  } catch (...) {
    // Starting a thread failed: stop the ranks already running, then report the failure.
    world.communicator(static_cast<std::int32_t>(threads.size()))
        .abort("could not start the thread of this rank");
    for (std::thread& thread : threads) thread.join();
    throw;
  }
  for (std::thread& thread : threads) thread.join();

  const std::int32_t first = world.failed_rank();
  if (first >= 0 && errors[static_cast<std::size_t>(first)]) {
    std::rethrow_exception(errors[static_cast<std::size_t>(first)]);
  }
  if (!error_order.empty()) {
    std::rethrow_exception(errors[static_cast<std::size_t>(error_order.front())]);
  }
  if (world.failed()) throw CommError(world.failure());
}

}  // namespace dcp::comm
