// SPDX-License-Identifier: Apache-2.0
// Tests of the local (threads) communicator over world sizes 1 to 8: data, order, failures.
#include "dcp/comm/local/local_communicator.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

#include "tests/comm/comm_checks.h"

namespace dcp::comm {
namespace {

using testing::check_all_pairs_many_groups;
using testing::check_barriers;
using testing::check_pairwise_order;
using testing::check_ring_exchange;
using testing::check_self_send;
using testing::check_zero_byte_messages;

using Clock = std::chrono::steady_clock;

// Failure bound for "promptly": far above the expected milliseconds, far below the 60 s timeout.
constexpr double kPromptSeconds = 20;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs a check on every rank; a failure shows the check's message.
void expect_check_passes(std::int32_t size, void (*check)(Communicator&)) {
  try {
    run_local_ranks(size, {}, [&](Communicator& comm) { check(comm); });
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

// Keeps the messages of the CommErrors each rank saw, by rank.
class SeenErrors {
 public:
  void add(std::int32_t rank, const std::string& message) {
    const std::lock_guard lock(mutex_);
    messages_[rank] = message;
  }
  std::map<std::int32_t, std::string> messages() const {
    const std::lock_guard lock(mutex_);
    return messages_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::int32_t, std::string> messages_;
};

// Waits for `group`, recording the CommError it throws (if any) before passing it on.
void wait_recording(Communicator& comm, GroupId group, SeenErrors& seen) {
  try {
    comm.wait(group);
  } catch (const CommError& e) {
    seen.add(comm.rank(), e.what());
    throw;
  }
}

class LocalCommunicatorTest : public ::testing::TestWithParam<std::int32_t> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, LocalCommunicatorTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<std::int32_t>& param_info) {
                           return "size" + std::to_string(param_info.param);
                         });

TEST_P(LocalCommunicatorTest, RingExchangeDeliversTheNeighboursBytes) {
  expect_check_passes(GetParam(), check_ring_exchange);
}

TEST_P(LocalCommunicatorTest, AllPairsExchangeCompletesWithManyGroupsInFlight) {
  expect_check_passes(GetParam(), check_all_pairs_many_groups);
}

TEST_P(LocalCommunicatorTest, NthSendMeetsNthReceiveWhateverTheSizesAndGroups) {
  expect_check_passes(GetParam(), check_pairwise_order);
}

TEST_P(LocalCommunicatorTest, RankCanSendToItself) {
  expect_check_passes(GetParam(), check_self_send);
}

TEST_P(LocalCommunicatorTest, ZeroByteMessagesAndEmptyGroupsComplete) {
  expect_check_passes(GetParam(), check_zero_byte_messages);
}

TEST_P(LocalCommunicatorTest, BarriersInterleaveWithExchanges) {
  expect_check_passes(GetParam(), check_barriers);
}

TEST_P(LocalCommunicatorTest, BarrierHoldsEveryRankUntilAllHaveEntered) {
  const std::int32_t size = GetParam();
  constexpr int kRounds = 20;
  std::atomic<int> arrived{0};
  std::atomic<int> violations{0};
  run_local_ranks(size, {}, [&](Communicator& comm) {
    for (int round = 1; round <= kRounds; ++round) {
      arrived.fetch_add(1);
      comm.barrier();
      if (arrived.load() != round * size) violations.fetch_add(1);
      comm.barrier();
    }
  });
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(arrived.load(), kRounds * size);
}

TEST_P(LocalCommunicatorTest, SizeMismatchFailsBothSidesNamingRanksAndSizes) {
  const std::int32_t size = GetParam();
  const std::int32_t receiver = size - 1;
  SeenErrors seen;
  const auto body = [&](Communicator& comm) {
    std::vector<std::uint8_t> out(8);
    std::vector<std::uint8_t> in(16);
    std::vector<TransferOp> ops;
    if (comm.rank() == 0) ops.push_back(testing::send_op(receiver, out));
    if (comm.rank() == receiver) ops.push_back(testing::recv_op(0, in));
    if (ops.empty()) return;
    wait_recording(comm, comm.start(ops), seen);
  };
  EXPECT_THROW(run_local_ranks(size, {}, body), CommError);
  const std::string expected = "size mismatch: rank 0 sends 8 bytes to rank " +
                               std::to_string(receiver) + ", which receives 16 bytes";
  const auto messages = seen.messages();
  ASSERT_TRUE(messages.contains(0));
  ASSERT_TRUE(messages.contains(receiver));
  EXPECT_TRUE(contains(messages.at(0), expected)) << messages.at(0);
  EXPECT_TRUE(contains(messages.at(receiver), expected)) << messages.at(receiver);
  EXPECT_TRUE(contains(messages.at(receiver), "rank " + std::to_string(receiver) + ": group 0"))
      << messages.at(receiver);
}

TEST_P(LocalCommunicatorTest, TimeoutNamesThePendingPeers) {
  const std::int32_t size = GetParam();
  const std::int32_t silent = size - 1;
  CommOptions options;
  options.timeout_seconds = 0.2;
  const auto body = [&](Communicator& comm) {
    if (comm.rank() != 0) return;  // nobody answers rank 0
    std::vector<std::uint8_t> in(8192);
    std::vector<std::uint8_t> out(16);
    std::vector<TransferOp> ops = {testing::recv_op(silent, in)};
    if (size > 1) ops.push_back(testing::send_op(1, out));
    comm.wait(comm.start(ops));
  };
  const Clock::time_point start = Clock::now();
  try {
    run_local_ranks(size, options, body);
    ADD_FAILURE() << "the wait did not time out";
  } catch (const CommError& e) {
    std::string expected = "rank 0: timed out after 0.2 s waiting for group 0: receive from rank " +
                           std::to_string(silent) + " (8192 bytes)";
    if (size > 1) expected += ", send to rank 1 (16 bytes)";
    EXPECT_EQ(e.what(), expected);
  }
  EXPECT_LT(seconds_since(start), kPromptSeconds);
}

TEST_P(LocalCommunicatorTest, BarrierTimeoutNamesTheRanksThatDidNotEnter) {
  const std::int32_t size = GetParam();
  CommOptions options;
  options.timeout_seconds = 0.2;
  const auto body = [](Communicator& comm) {
    if (comm.rank() == 0) comm.barrier();
  };
  if (size == 1) {
    EXPECT_NO_THROW(run_local_ranks(size, options, body));
    return;
  }
  try {
    run_local_ranks(size, options, body);
    ADD_FAILURE() << "the barrier did not time out";
  } catch (const CommError& e) {
    std::string missing;
    for (std::int32_t r = 1; r < size; ++r) missing += (r > 1 ? ", " : "") + std::to_string(r);
    EXPECT_EQ(std::string(e.what()),
              "rank 0: timed out after 0.2 s in barrier 1: not entered by rank(s) " + missing);
  }
}

TEST_P(LocalCommunicatorTest, ThrowingRankStopsTheOthersPromptlyAndKeepsItsExceptionType) {
  const std::int32_t size = GetParam();
  const std::int32_t thrower = size - 1;
  SeenErrors seen;
  const auto body = [&](Communicator& comm) {
    if (comm.rank() == thrower) {
      // Give the others time to block in wait(), so the abort has to wake them.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      throw InvalidInput("bad input on purpose");
    }
    std::vector<std::uint8_t> in(64);
    const TransferOp op = testing::recv_op(thrower, in);
    wait_recording(comm, comm.start({&op, 1}), seen);  // never sent: only the abort ends it
  };
  const Clock::time_point start = Clock::now();
  try {
    run_local_ranks(size, {}, body);  // default 60 s timeout
    ADD_FAILURE() << "run_local_ranks did not throw";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "bad input on purpose");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the root cause was replaced by: " << e.what();
  }
  EXPECT_LT(seconds_since(start), kPromptSeconds);
  const auto messages = seen.messages();
  EXPECT_EQ(messages.size(), static_cast<std::size_t>(size - 1));
  for (const auto& [rank, message] : messages) {
    EXPECT_EQ(message, "rank " + std::to_string(thrower) + " failed: bad input on purpose")
        << "rank " << rank;
  }
}

TEST_P(LocalCommunicatorTest, AbortWakesEveryWaiterWithTheReason) {
  const std::int32_t size = GetParam();
  SeenErrors seen;
  const auto body = [&](Communicator& comm) {
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      comm.abort("disk full");
      if (comm.size() > 1) return;  // abort returns for the local backend
    }
    std::vector<std::uint8_t> in(64);
    const TransferOp op = testing::recv_op(0, in);
    try {
      comm.wait(comm.start({&op, 1}));  // on rank 0 (size 1), start() already refuses
    } catch (const CommError& e) {
      seen.add(comm.rank(), e.what());
      throw;
    }
  };
  const Clock::time_point start = Clock::now();
  try {
    run_local_ranks(size, {}, body);
    ADD_FAILURE() << "run_local_ranks did not throw";
  } catch (const CommError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0 failed: disk full");
  }
  EXPECT_LT(seconds_since(start), kPromptSeconds);
  const auto messages = seen.messages();
  EXPECT_EQ(messages.size(), static_cast<std::size_t>(size == 1 ? 1 : size - 1));
  for (const auto& [rank, message] : messages) {
    EXPECT_EQ(message, "rank 0 failed: disk full") << "rank " << rank;
  }
}

TEST_P(LocalCommunicatorTest, FailedWorldRefusesNewWorkOnEveryRank) {
  const std::int32_t size = GetParam();
  LocalWorld world(size);
  EXPECT_FALSE(world.failed());
  EXPECT_EQ(world.failed_rank(), -1);
  world.communicator(size - 1).abort("out of memory");
  world.communicator(0).abort("a later failure does not replace the first");
  EXPECT_TRUE(world.failed());
  EXPECT_EQ(world.failed_rank(), size - 1);
  EXPECT_EQ(world.failure(), "rank " + std::to_string(size - 1) + " failed: out of memory");
  for (std::int32_t rank = 0; rank < size; ++rank) {
    Communicator& comm = world.communicator(rank);
    EXPECT_THROW(comm.start({}), CommError);
    EXPECT_THROW(comm.barrier(), CommError);
  }
}

TEST_P(LocalCommunicatorTest, RanksKnowTheirNumberAndTheWorldSize) {
  const std::int32_t size = GetParam();
  std::atomic<int> rank_sum{0};
  run_local_ranks(size, {}, [&](Communicator& comm) {
    EXPECT_EQ(comm.name(), "local");
    EXPECT_EQ(comm.size(), size);
    rank_sum.fetch_add(comm.rank());
  });
  EXPECT_EQ(rank_sum.load(), size * (size - 1) / 2);
}

TEST(LocalWorldTest, RejectsAnEmptyWorldAndBadTimeouts) {
  EXPECT_THROW(LocalWorld(0), InvalidInput);
  CommOptions negative;
  negative.timeout_seconds = -1;
  EXPECT_THROW(LocalWorld(2, negative), InvalidInput);
  CommOptions not_a_number;
  not_a_number.timeout_seconds = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(LocalWorld(2, not_a_number), InvalidInput);
  EXPECT_THROW(run_local_ranks(0, {}, [](Communicator&) {}), InvalidInput);
}

TEST(LocalWorldTest, CommunicatorRejectsARankOutsideTheWorld) {
  LocalWorld world(3);
  EXPECT_EQ(world.communicator(2).rank(), 2);
  EXPECT_THROW(world.communicator(3), InvalidInput);
  EXPECT_THROW(world.communicator(-1), InvalidInput);
}

TEST(LocalWorldTest, StartRejectsBadPeersAndMissingBuffersBeforePostingAnything) {
  LocalWorld world(2);
  Communicator& comm = world.communicator(0);
  std::uint8_t byte = 0;
  const TransferOp bad_peer[] = {{TransferOp::Kind::kSend, 1, &byte, 1},
                                 {TransferOp::Kind::kRecv, 5, &byte, 1}};
  try {
    comm.start(bad_peer);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_TRUE(contains(e.what(), "transfer 1 (receive) names peer 5")) << e.what();
  }
  const TransferOp no_buffer = {TransferOp::Kind::kSend, 1, nullptr, 4};
  EXPECT_THROW(comm.start({&no_buffer, 1}), InvalidInput);
  // Nothing was posted: the first valid exchange matches from the start.
  std::uint8_t out = 7;
  std::uint8_t in = 0;
  const TransferOp send = {TransferOp::Kind::kSend, 1, &out, 1};
  const TransferOp recv = {TransferOp::Kind::kRecv, 0, &in, 1};
  const GroupId send_group = comm.start({&send, 1});
  world.communicator(1).wait(world.communicator(1).start({&recv, 1}));
  comm.wait(send_group);
  EXPECT_EQ(in, 7);
}

TEST(LocalWorldTest, WaitOnAnUnknownOrFinishedGroupIsAnError) {
  LocalWorld world(1);
  Communicator& comm = world.communicator(0);
  EXPECT_THROW(comm.wait(42), Error);
  const GroupId group = comm.start({});
  comm.wait(group);
  EXPECT_THROW(comm.wait(group), Error);
  EXPECT_FALSE(world.failed());
}

TEST(LocalWorldTest, RunnerReportsAnAbortEvenWhenNoRankThrew) {
  try {
    run_local_ranks(2, {}, [](Communicator& comm) {
      if (comm.rank() == 1) comm.abort("gave up");
    });
    ADD_FAILURE() << "no error";
  } catch (const CommError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 1 failed: gave up");
  }
}

}  // namespace
}  // namespace dcp::comm
