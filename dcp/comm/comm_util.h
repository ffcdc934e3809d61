// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the communicator backends: checks of options and operations, and error text.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "dcp/comm/communicator.h"

namespace dcp::comm::detail {

// Throws InvalidInput unless options.timeout_seconds is positive and finite.
void validate_options(const CommOptions& options);

// The timeout as a steady-clock duration (capped at about a year, so deadlines never overflow).
std::chrono::steady_clock::duration timeout_duration(const CommOptions& options);

// Throws InvalidInput naming the operation's index unless every peer is in [0, size) and every
// operation with bytes > 0 has data. `rank` is the caller's rank, for the message.
void validate_ops(std::span<const TransferOp> ops, std::int32_t rank, std::int32_t size);

// "0.2 s", "60 s": a timeout as the error messages show it.
std::string seconds_text(double seconds);

// "receive from rank 1 (8192 bytes)" or "send to rank 3 (16 bytes)".
std::string describe_op(TransferOp::Kind kind, std::int32_t peer, std::size_t bytes);

// Joins described operations with ", ", showing at most kMaxListed and then "and N more".
class PendingList {
 public:
  static constexpr std::size_t kMaxListed = 8;
  void add(const std::string& item);
  std::string text() const;

 private:
  std::string text_;
  std::size_t count_ = 0;
};

// "size mismatch: rank 0 sends 8 bytes to rank 1, which receives 16 bytes".
std::string mismatch_text(std::int32_t sender, std::size_t send_bytes, std::int32_t receiver,
                          std::size_t recv_bytes);

}  // namespace dcp::comm::detail
