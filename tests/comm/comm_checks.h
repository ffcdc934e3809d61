// SPDX-License-Identifier: Apache-2.0
// Backend-independent checks of the Communicator contract, run by every rank; a failed check
// throws CheckFailed, so the same checks serve the GoogleTest suite and the MPI test program.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "dcp/comm/communicator.h"

namespace dcp::comm::testing {

class CheckFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check(bool condition, const std::string& what) {
  if (!condition) throw CheckFailed(what);
}

// The byte at `index` of message `message` from `sender` to `receiver`: every message is
// distinguishable from every other one, and every position within it.
inline std::uint8_t pattern_byte(std::int32_t sender, std::int32_t receiver, std::int64_t message,
                                 std::size_t index) {
  const auto mix = static_cast<std::uint64_t>(sender) * 1000003u +
                   static_cast<std::uint64_t>(receiver) * 10007u +
                   static_cast<std::uint64_t>(message) * 101u + static_cast<std::uint64_t>(index);
  return static_cast<std::uint8_t>((mix * 2654435761u) >> 13);
}

inline std::vector<std::uint8_t> make_message(std::int32_t sender, std::int32_t receiver,
                                              std::int64_t message, std::size_t bytes) {
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = pattern_byte(sender, receiver, message, i);
  return data;
}

// Throws unless `data` is message `message` from `sender` to `receiver`.
inline void expect_message(const std::vector<std::uint8_t>& data, std::int32_t sender,
                           std::int32_t receiver, std::int64_t message, const std::string& where) {
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (data[i] != pattern_byte(sender, receiver, message, i)) {
      throw CheckFailed(where + ": rank " + std::to_string(receiver) + " got a wrong byte " +
                        std::to_string(i) + " of message " + std::to_string(message) +
                        " from rank " + std::to_string(sender) + " (" +
                        std::to_string(data.size()) + " bytes)");
    }
  }
}

inline TransferOp send_op(std::int32_t peer, std::vector<std::uint8_t>& data) {
  return TransferOp{TransferOp::Kind::kSend, peer, data.data(), data.size()};
}

inline TransferOp recv_op(std::int32_t peer, std::vector<std::uint8_t>& data) {
  return TransferOp{TransferOp::Kind::kRecv, peer, data.data(), data.size()};
}

// Each rank sends to the next and receives from the previous one, several rounds, with sizes from
// 1 byte to 1 MiB (large enough for MPI's rendezvous protocol).
inline void check_ring_exchange(Communicator& comm) {
  const std::int32_t rank = comm.rank();
  const std::int32_t size = comm.size();
  const std::int32_t next = (rank + 1) % size;
  const std::int32_t previous = (rank + size - 1) % size;
  const std::size_t sizes[] = {1, 100, 4096, std::size_t{1} << 20};
  for (std::int64_t round = 0; round < 4; ++round) {
    const std::size_t bytes = sizes[round];
    std::vector<std::uint8_t> out = make_message(rank, next, round, bytes);
    std::vector<std::uint8_t> in(bytes);
    const TransferOp ops[] = {recv_op(previous, in), send_op(next, out)};
    comm.wait(comm.start(ops));
    expect_message(in, previous, rank, round, "ring exchange");
  }
}

// Every rank sends to and receives from every rank (itself included) in each of several groups,
// all started before any is waited for; the groups are waited for in reverse order.
inline void check_all_pairs_many_groups(Communicator& comm) {
  constexpr std::int64_t kGroups = 6;
  const std::int32_t rank = comm.rank();
  const std::int32_t size = comm.size();
  const auto bytes_of = [](std::int32_t from, std::int32_t to, std::int64_t group) {
    return static_cast<std::size_t>(1 + (from * 131 + to * 17 + group * 977) % 3000);
  };
  std::vector<std::vector<std::uint8_t>> outs;
  std::vector<std::vector<std::uint8_t>> ins;
  outs.reserve(static_cast<std::size_t>(kGroups * size));
  ins.reserve(static_cast<std::size_t>(kGroups * size));
  std::vector<GroupId> groups;
  for (std::int64_t g = 0; g < kGroups; ++g) {
    std::vector<TransferOp> ops;
    for (std::int32_t peer = 0; peer < size; ++peer) {
      outs.push_back(make_message(rank, peer, g, bytes_of(rank, peer, g)));
      ins.emplace_back(bytes_of(peer, rank, g));
      ops.push_back(send_op(peer, outs.back()));
      ops.push_back(recv_op(peer, ins.back()));
    }
    groups.push_back(comm.start(ops));
  }
  for (auto group = groups.rbegin(); group != groups.rend(); ++group) comm.wait(*group);
  for (std::int64_t g = 0; g < kGroups; ++g) {
    for (std::int32_t peer = 0; peer < size; ++peer) {
      expect_message(ins[static_cast<std::size_t>(g * size + peer)], peer, rank, g,
                     "all-pairs exchange");
    }
  }
}

// Between every ordered pair, several messages of different sizes, each in its own group and in
// different groups on the two sides: sends are started before receives on even ranks and after
// them on odd ranks, and groups are waited for in a shuffled order. The n-th send must land in the
// n-th receive.
inline void check_pairwise_order(Communicator& comm) {
  constexpr std::int64_t kMessages = 7;
  const std::int32_t rank = comm.rank();
  const std::int32_t size = comm.size();
  const auto bytes_of = [](std::int32_t from, std::int32_t to, std::int64_t message) {
    const std::size_t table[] = {40, 3, 0, 1000, 17, 5000, 64};
    return table[static_cast<std::size_t>((message + from + 2 * to) % 7)];
  };
  std::vector<std::vector<std::uint8_t>> outs;
  std::vector<std::vector<std::uint8_t>> ins;
  outs.reserve(static_cast<std::size_t>(kMessages * size));
  ins.reserve(static_cast<std::size_t>(kMessages * size));
  std::vector<GroupId> groups;
  const auto start_sends = [&] {
    for (std::int64_t m = 0; m < kMessages; ++m) {
      for (std::int32_t peer = 0; peer < size; ++peer) {
        outs.push_back(make_message(rank, peer, m, bytes_of(rank, peer, m)));
        const TransferOp op = send_op(peer, outs.back());
        groups.push_back(comm.start({&op, 1}));
      }
    }
  };
  const auto start_receives = [&] {
    for (std::int64_t m = 0; m < kMessages; ++m) {
      for (std::int32_t peer = 0; peer < size; ++peer) {
        ins.emplace_back(bytes_of(peer, rank, m));
        const TransferOp op = recv_op(peer, ins.back());
        groups.push_back(comm.start({&op, 1}));
      }
    }
  };
  if (rank % 2 == 0) {
    start_sends();
    start_receives();
  } else {
    start_receives();
    start_sends();
  }
  // A fixed shuffle: stride through the groups with a step coprime to their number.
  const std::size_t count = groups.size();
  std::size_t step = 7;
  while (std::gcd(step, count) != 1) ++step;
  for (std::size_t k = 0, i = 0; k < count; ++k, i = (i + step) % count) comm.wait(groups[i]);
  for (std::int64_t m = 0; m < kMessages; ++m) {
    for (std::int32_t peer = 0; peer < size; ++peer) {
      expect_message(ins[static_cast<std::size_t>(m * size + peer)], peer, rank, m,
                     "pairwise order");
    }
  }
}

// A rank sends to itself: within one group, and across groups with the receive started first.
inline void check_self_send(Communicator& comm) {
  const std::int32_t rank = comm.rank();
  std::vector<std::uint8_t> out = make_message(rank, rank, 0, 333);
  std::vector<std::uint8_t> in(333);
  const TransferOp both[] = {send_op(rank, out), recv_op(rank, in)};
  comm.wait(comm.start(both));
  expect_message(in, rank, rank, 0, "self-send in one group");

  std::vector<std::uint8_t> out2 = make_message(rank, rank, 1, 70000);
  std::vector<std::uint8_t> in2(70000);
  const TransferOp receive = recv_op(rank, in2);
  const GroupId receive_group = comm.start({&receive, 1});
  const TransferOp send = send_op(rank, out2);
  const GroupId send_group = comm.start({&send, 1});
  comm.wait(send_group);
  comm.wait(receive_group);
  expect_message(in2, rank, rank, 1, "self-send across groups");
}

// Zero-byte messages (with and without a buffer) between every pair, interleaved with non-empty
// ones whose content proves the order held; and an empty group.
inline void check_zero_byte_messages(Communicator& comm) {
  const std::int32_t rank = comm.rank();
  const std::int32_t size = comm.size();
  comm.wait(comm.start({}));
  std::vector<std::vector<std::uint8_t>> outs;
  std::vector<std::vector<std::uint8_t>> ins;
  outs.reserve(static_cast<std::size_t>(2 * size));
  ins.reserve(static_cast<std::size_t>(2 * size));
  std::uint8_t spare_out = 0;
  std::uint8_t spare_in = 0;
  std::vector<TransferOp> ops;
  for (std::int32_t peer = 0; peer < size; ++peer) {
    outs.push_back(make_message(rank, peer, 0, 5));
    outs.push_back(make_message(rank, peer, 1, 3));
    ins.emplace_back(5);
    ins.emplace_back(3);
    ops.push_back(TransferOp{TransferOp::Kind::kSend, peer, nullptr, 0});
    ops.push_back(send_op(peer, outs[outs.size() - 2]));
    ops.push_back(TransferOp{TransferOp::Kind::kSend, peer, &spare_out, 0});
    ops.push_back(send_op(peer, outs.back()));
    ops.push_back(TransferOp{TransferOp::Kind::kRecv, peer, &spare_in, 0});
    ops.push_back(recv_op(peer, ins[ins.size() - 2]));
    ops.push_back(TransferOp{TransferOp::Kind::kRecv, peer, nullptr, 0});
    ops.push_back(recv_op(peer, ins.back()));
  }
  comm.wait(comm.start(ops));
  for (std::int32_t peer = 0; peer < size; ++peer) {
    expect_message(ins[static_cast<std::size_t>(2 * peer)], peer, rank, 0, "zero-byte messages");
    expect_message(ins[static_cast<std::size_t>(2 * peer + 1)], peer, rank, 1,
                   "zero-byte messages");
  }
  check(spare_in == 0, "a zero-byte receive wrote its buffer");
}

// Barriers interleaved with exchanges; whether they hold every rank back is checked where the
// ranks can share memory (the local tests).
inline void check_barriers(Communicator& comm) {
  for (int i = 0; i < 3; ++i) comm.barrier();
  check_ring_exchange(comm);
  comm.barrier();
}

// Every check above, in order.
inline void run_all_checks(Communicator& comm) {
  check_ring_exchange(comm);
  check_all_pairs_many_groups(comm);
  check_pairwise_order(comm);
  check_self_send(comm);
  check_zero_byte_messages(comm);
  check_barriers(comm);
}

}  // namespace dcp::comm::testing
