// SPDX-License-Identifier: Apache-2.0
// MpiSession and MpiCommunicator: nonblocking MPI point-to-point messages polled with a deadline.
#include "dcp/comm/mpi/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dcp/core/error.h"

#include "dcp/comm/comm_util.h"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

namespace dcp::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTag = 0;  // every message travels on the private communicator with one tag

// MPI can be initialised once per process, so at most one session may ever be created.
std::atomic<bool> g_session_created{false};

// The SIGTERM line is formatted before the handler is installed: a handler may only call
// async-signal-safe functions (write, _exit), not format text.
char g_term_message[96] = {};
std::size_t g_term_length = 0;
struct sigaction g_previous_term = {};

void on_sigterm(int /*signal*/) {
  // A short or failed write cannot be helped inside a signal handler.
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, g_term_message, g_term_length);
  ::_exit(1);
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, static_cast<std::size_t>(std::max(length, 0)));
}

// How one transfer is described to MPI: a plain byte count, or one element of a derived datatype
// made of whole blocks plus a remainder when the count would not fit an int.
struct MessageShape {
  void* buffer = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_BYTE;
  bool derived = false;
};

// One operation of a group. Sends are posted by start(); receives wait in their peer's queue
// until wait() or barrier() finds the matching message with MPI_Improbe, checks its size and
// receives exactly that message with MPI_Imrecv.
struct PostedOp {
  TransferOp::Kind kind = TransferOp::Kind::kSend;
  std::int32_t peer = 0;
  std::size_t bytes = 0;
  MessageShape shape;   // shape.type is freed with the group when derived
  bool posted = false;  // the MPI request exists (it is MPI_REQUEST_NULL again once complete)
};

struct PendingGroup {
  std::vector<PostedOp> ops;
  std::vector<MPI_Request> requests;  // one per operation
  std::size_t unposted = 0;           // receives still waiting for their message
};

// A receive waiting for its message, in its peer's queue (issue order).
struct QueuedRecv {
  GroupId group = 0;
  PendingGroup* pending = nullptr;  // groups are erased only once every receive is posted
  std::size_t index = 0;
};

// Polling pace: spin (yielding) for a while, then sleep with exponential backoff up to 1 ms.
void back_off(int polls) {
  constexpr int kSpinPolls = 64;
  if (polls < kSpinPolls) {
    std::this_thread::yield();
    return;
  }
  const int doublings = std::min(polls - kSpinPolls, 8);
  const auto delay = std::chrono::microseconds(std::min(1000, 4 << doublings));
  std::this_thread::sleep_for(delay);
}

}  // namespace

// ---- MpiSession ----

MpiSession::MpiSession() { init(nullptr, nullptr); }

MpiSession::MpiSession(int& argc, char**& argv) { init(&argc, &argv); }

void MpiSession::init(int* argc, char*** argv) {
  if (g_session_created.exchange(true)) {
    throw Error("an MpiSession already existed in this process; MPI can be initialised only once");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0) throw Error("MPI was initialised outside MpiSession");
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) throw CommError("MPI_Init_thread failed: " + mpi_error_text(rc));
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw CommError("this MPI provides thread level " + std::to_string(provided) +
                    ", below MPI_THREAD_SERIALIZED which dcp needs");
  }
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  rank_ = rank;
  size_ = size;

  const int length =
      std::snprintf(g_term_message, sizeof(g_term_message),
                    "dcp: rank %d terminated: another rank of the job failed\n", rank);
  g_term_length =
      std::min(static_cast<std::size_t>(std::max(length, 0)), sizeof(g_term_message) - 1);
  struct sigaction action = {};
  action.sa_handler = &on_sigterm;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  sigaction(SIGTERM, &action, &g_previous_term);
}

MpiSession::~MpiSession() {
  MPI_Finalize();
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

// ---- MpiCommunicator ----

struct MpiCommunicator::Impl {
  // Throws CommError("rank r: <what>") and leaves the communicator unusable.
  [[noreturn]] void fail(const std::string& what) {
    broken = what;
    throw CommError("rank " + std::to_string(rank) + ": " + what);
  }

  void check(int rc, const std::string& what) {
    if (rc != MPI_SUCCESS) fail(what + " failed: " + mpi_error_text(rc));
  }

  void ensure_usable() const {
    if (!broken.empty()) {
      throw CommError("rank " + std::to_string(rank) +
                      ": the communicator is unusable after an earlier error: " + broken);
    }
  }

  std::string timeout_text() const {
    return "timed out after " + detail::seconds_text(options.timeout_seconds);
  }

  MessageShape shape(void* data, std::size_t bytes) {
    static char empty_buffer = 0;  // MPI wants a valid address even for 0 bytes
    if (bytes <= max_block) {
      return MessageShape{data != nullptr ? data : &empty_buffer, static_cast<int>(bytes), MPI_BYTE,
                          false};
    }
    const std::size_t blocks = bytes / max_block;
    const std::size_t rest = bytes % max_block;
    MPI_Datatype block = MPI_DATATYPE_NULL;
    check(MPI_Type_contiguous(static_cast<int>(max_block), MPI_BYTE, &block),
          "MPI_Type_contiguous");
    MPI_Datatype whole = MPI_DATATYPE_NULL;
    int rc = MPI_SUCCESS;
    if (rest == 0) {
      rc = MPI_Type_contiguous(static_cast<int>(blocks), block, &whole);
    } else {
      int lengths[2] = {static_cast<int>(blocks), static_cast<int>(rest)};
      MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(blocks * max_block)};
      MPI_Datatype types[2] = {block, MPI_BYTE};
      rc = MPI_Type_create_struct(2, lengths, displacements, types, &whole);
    }
    MPI_Type_free(&block);
    check(rc, "building the datatype of a " + std::to_string(bytes) + "-byte message");
    check(MPI_Type_commit(&whole), "MPI_Type_commit");
    return MessageShape{data, 1, whole, true};
  }

  // Frees what a group still holds. Requests still active are released to complete on their own
  // (every posted receive has already matched its message, so there is nothing to cancel); this
  // happens only after an error, on the way to abort() or the end of the process.
  static void release(PendingGroup& group) noexcept {
    for (MPI_Request& request : group.requests) {
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    }
    for (PostedOp& op : group.ops) {
      if (op.shape.derived) MPI_Type_free(&op.shape.type);
      op.shape.derived = false;
    }
  }

  // Matches queued receives with arrived messages, in issue order per peer: the size of each
  // message is known before it is received, so a mismatch is reported with both sizes and MPI never
  // truncates into (or past) a receive buffer. Returns how many receives were posted.
  int progress_receives() {
    int posted = 0;
    for (std::size_t peer = 0; peer < unmatched.size(); ++peer) {
      std::deque<QueuedRecv>& queue = unmatched[peer];
      while (!queue.empty()) {
        const QueuedRecv& front = queue.front();
        int found = 0;
        MPI_Message message = MPI_MESSAGE_NULL;
        MPI_Status status;
        check(MPI_Improbe(static_cast<int>(peer), kTag, comm, &found, &message, &status),
              "MPI_Improbe");
        if (found == 0) break;
        PostedOp& op = front.pending->ops[front.index];
        MPI_Count sent = 0;
        check(MPI_Get_elements_x(&status, MPI_BYTE, &sent), "MPI_Get_elements_x");
        if (sent < 0 || static_cast<std::size_t>(sent) != op.bytes) {
          // The matched message stays unreceived; the communicator is unusable from here on.
          fail("group " + std::to_string(front.group) + ": " +
               detail::mismatch_text(op.peer, sent < 0 ? 0 : static_cast<std::size_t>(sent), rank,
                                     op.bytes));
        }
        check(MPI_Imrecv(op.shape.buffer, op.shape.count, op.shape.type, &message,
                         &front.pending->requests[front.index]),
              "receiving the " + detail::describe_op(op.kind, op.peer, op.bytes));
        op.posted = true;
        --front.pending->unposted;
        queue.pop_front();
        ++posted;
      }
    }
    return posted;
  }

  // Fails with the MPI error of a completed operation, if it has one.
  void check_completed(GroupId id, const PostedOp& op, int op_rc) {
    if (op_rc == MPI_SUCCESS) return;
    fail("group " + std::to_string(id) + ": " + detail::describe_op(op.kind, op.peer, op.bytes) +
         " failed: " + mpi_error_text(op_rc));
  }

  MPI_Comm comm = MPI_COMM_NULL;
  std::int32_t rank = 0;
  std::int32_t size = 1;
  CommOptions options;
  Clock::duration timeout{};
  std::size_t max_block = MpiCommunicator::kDefaultMaxBlockBytes;
  GroupId next_group = 0;
  std::uint64_t barriers = 0;
  std::map<GroupId, PendingGroup> groups;
  std::vector<std::deque<QueuedRecv>> unmatched;  // per peer: receives waiting for their message
  std::vector<MPI_Request> abandoned;             // barrier requests left behind by a timeout
  std::string broken;                             // the error that made the communicator unusable
};

MpiCommunicator::MpiCommunicator(const MpiSession& session, CommOptions options,
                                 std::size_t max_block_bytes)
    : impl_(std::make_unique<Impl>()) {
  detail::validate_options(options);
  if (max_block_bytes < 1 || max_block_bytes > kDefaultMaxBlockBytes) {
    throw InvalidInput("MPI block size must be in [1, " + std::to_string(kDefaultMaxBlockBytes) +
                       "] bytes, got " + std::to_string(max_block_bytes));
  }
  Impl& impl = *impl_;
  impl.rank = session.world_rank();
  impl.options = options;
  impl.timeout = detail::timeout_duration(options);
  impl.max_block = max_block_bytes;
  impl.check(MPI_Comm_dup(MPI_COMM_WORLD, &impl.comm), "MPI_Comm_dup");
  impl.check(MPI_Comm_set_errhandler(impl.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int rank = 0;
  int size = 1;
  impl.check(MPI_Comm_rank(impl.comm, &rank), "MPI_Comm_rank");
  impl.check(MPI_Comm_size(impl.comm, &size), "MPI_Comm_size");
  impl.rank = rank;
  impl.size = size;
  impl.unmatched.resize(static_cast<std::size_t>(size));
}

MpiCommunicator::~MpiCommunicator() {
  Impl& impl = *impl_;
  for (auto& entry : impl.groups) Impl::release(entry.second);
  for (MPI_Request& request : impl.abandoned) {
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  }
  if (impl.comm != MPI_COMM_NULL) MPI_Comm_free(&impl.comm);
}

std::int32_t MpiCommunicator::rank() const { return impl_->rank; }

std::int32_t MpiCommunicator::size() const { return impl_->size; }

GroupId MpiCommunicator::start(std::span<const TransferOp> ops) {
  Impl& impl = *impl_;
  impl.ensure_usable();
  detail::validate_ops(ops, impl.rank, impl.size);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].bytes / impl.max_block > static_cast<std::size_t>(INT_MAX)) {
      throw InvalidInput("rank " + std::to_string(impl.rank) + ": transfer " + std::to_string(i) +
                         " of " + std::to_string(ops[i].bytes) + " bytes is too large for MPI");
    }
  }
  const GroupId id = impl.next_group;
  PendingGroup group;
  group.ops.reserve(ops.size());
  group.requests.assign(ops.size(), MPI_REQUEST_NULL);
  try {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const TransferOp& op = ops[i];
      group.ops.push_back(PostedOp{op.kind, op.peer, op.bytes, impl.shape(op.data, op.bytes)});
      if (op.kind == TransferOp::Kind::kRecv) continue;
      const MessageShape& message = group.ops.back().shape;
      impl.check(MPI_Isend(message.buffer, message.count, message.type, op.peer, kTag, impl.comm,
                           &group.requests[i]),
                 "posting the " + detail::describe_op(op.kind, op.peer, op.bytes));
      group.ops.back().posted = true;
    }
  } catch (...) {
    Impl::release(group);
    throw;
  }
  impl.next_group = id + 1;
  PendingGroup& stored = impl.groups.emplace(id, std::move(group)).first->second;
  for (std::size_t i = 0; i < stored.ops.size(); ++i) {
    const PostedOp& op = stored.ops[i];
    if (op.kind != TransferOp::Kind::kRecv) continue;
    impl.unmatched[static_cast<std::size_t>(op.peer)].push_back(QueuedRecv{id, &stored, i});
    ++stored.unposted;
  }
  return id;
}

void MpiCommunicator::wait(GroupId group_id) {
  Impl& impl = *impl_;
  impl.ensure_usable();
  const auto found = impl.groups.find(group_id);
  if (found == impl.groups.end()) {
    throw Error("rank " + std::to_string(impl.rank) + ": wait on group " +
                std::to_string(group_id) + ", which was never started or was already waited for");
  }
  PendingGroup& group = found->second;
  const std::size_t count = group.requests.size();
  std::vector<int> indices(std::max<std::size_t>(count, 1));
  std::vector<MPI_Status> statuses(std::max<std::size_t>(count, 1));
  const Clock::time_point deadline = Clock::now() + impl.timeout;
  int polls = 0;
  for (;;) {
    const int posted = impl.progress_receives();
    int completed = 0;
    const int rc = MPI_Testsome(static_cast<int>(count), group.requests.data(), &completed,
                                indices.data(), statuses.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      impl.fail("group " + std::to_string(group_id) +
                ": MPI_Testsome failed: " + mpi_error_text(rc));
    }
    if (completed == MPI_UNDEFINED) {
      // No active request: complete once every receive has found its message.
      if (group.unposted == 0) break;
      completed = 0;
    }
    for (int k = 0; k < completed; ++k) {
      const auto i = static_cast<std::size_t>(indices[static_cast<std::size_t>(k)]);
      // Per-request error codes are set only when the call reports MPI_ERR_IN_STATUS.
      const int op_rc =
          rc == MPI_ERR_IN_STATUS ? statuses[static_cast<std::size_t>(k)].MPI_ERROR : MPI_SUCCESS;
      impl.check_completed(group_id, group.ops[i], op_rc);
    }
    if (completed > 0 || posted > 0) {
      polls = 0;
      continue;
    }
    if (Clock::now() >= deadline) {
      detail::PendingList pending;
      for (std::size_t i = 0; i < count; ++i) {
        const PostedOp& op = group.ops[i];
        if (op.posted && group.requests[i] == MPI_REQUEST_NULL) continue;
        pending.add(detail::describe_op(op.kind, op.peer, op.bytes));
      }
      impl.fail(impl.timeout_text() + " waiting for group " + std::to_string(group_id) + ": " +
                pending.text());
    }
    back_off(polls++);
  }
  Impl::release(group);
  impl.groups.erase(found);
}

void MpiCommunicator::barrier() {
  Impl& impl = *impl_;
  impl.ensure_usable();
  const std::uint64_t number = ++impl.barriers;
  MPI_Request request = MPI_REQUEST_NULL;
  impl.check(MPI_Ibarrier(impl.comm, &request), "MPI_Ibarrier");
  const Clock::time_point deadline = Clock::now() + impl.timeout;
  int polls = 0;
  for (;;) {
    impl.progress_receives();  // keeps started receives moving while this rank waits here
    int done = 0;
    const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      impl.abandoned.push_back(request);
      impl.fail("barrier " + std::to_string(number) + " failed: " + mpi_error_text(rc));
    }
    if (done != 0) return;
    if (Clock::now() >= deadline) {
      impl.abandoned.push_back(request);
      impl.fail(impl.timeout_text() + " in barrier " + std::to_string(number) +
                ": some rank has not entered it");
    }
    back_off(polls++);
  }
}

void MpiCommunicator::abort(std::string_view reason) noexcept {
  const Impl& impl = *impl_;
  try {
    // Reasons from this communicator's own errors already start with "rank r: ".
    const std::string prefix = "rank " + std::to_string(impl.rank) + ": ";
    std::string line = "dcp: ";
    if (reason.substr(0, prefix.size()) != prefix) line += prefix;
    line += reason;
    line += '\n';
    std::fputs(line.c_str(), stderr);
  } catch (...) {
    std::fputs("dcp: a rank failed\n", stderr);
  }
  std::fflush(stderr);
  MPI_Abort(impl.comm != MPI_COMM_NULL ? impl.comm : MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort should not return; make sure abort() never does
}

}  // namespace dcp::comm
