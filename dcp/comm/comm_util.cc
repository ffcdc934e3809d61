// SPDX-License-Identifier: Apache-2.0
// Option and operation checks and error text shared by the local and MPI communicators.
#include "dcp/comm/comm_util.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "dcp/core/error.h"

namespace dcp::comm::detail {

void validate_options(const CommOptions& options) {
  if (!std::isfinite(options.timeout_seconds) || options.timeout_seconds <= 0) {
    throw InvalidInput("communicator timeout must be a positive number of seconds, got " +
                       seconds_text(options.timeout_seconds));
  }
}

std::chrono::steady_clock::duration timeout_duration(const CommOptions& options) {
  constexpr double kMaxSeconds = 365.0 * 24 * 3600;
  const double seconds = std::min(options.timeout_seconds, kMaxSeconds);
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds));
}

void validate_ops(std::span<const TransferOp> ops, std::int32_t rank, std::int32_t size) {
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const TransferOp& op = ops[i];
    const char* what = op.kind == TransferOp::Kind::kSend ? "send" : "receive";
    if (op.peer < 0 || op.peer >= size) {
      throw InvalidInput("rank " + std::to_string(rank) + ": transfer " + std::to_string(i) + " (" +
                         what + ") names peer " + std::to_string(op.peer) +
                         ", outside the ranks [0, " + std::to_string(size) + ")");
    }
    if (op.bytes > 0 && op.data == nullptr) {
      throw InvalidInput("rank " + std::to_string(rank) + ": transfer " + std::to_string(i) + " (" +
                         what + ", " + std::to_string(op.bytes) + " bytes) has no buffer");
    }
  }
}

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << seconds << " s";
  return out.str();
}

std::string describe_op(TransferOp::Kind kind, std::int32_t peer, std::size_t bytes) {
  std::string text = kind == TransferOp::Kind::kSend ? "send to rank " : "receive from rank ";
  text += std::to_string(peer);
  text += " (" + std::to_string(bytes) + " bytes)";
  return text;
}

void PendingList::add(const std::string& item) {
  ++count_;
  if (count_ > kMaxListed) return;
  if (!text_.empty()) text_ += ", ";
  text_ += item;
}

std::string PendingList::text() const {
  if (count_ <= kMaxListed) return text_;
  return text_ + " and " + std::to_string(count_ - kMaxListed) + " more";
}

std::string mismatch_text(std::int32_t sender, std::size_t send_bytes, std::int32_t receiver,
                          std::size_t recv_bytes) {
  return "size mismatch: rank " + std::to_string(sender) + " sends " + std::to_string(send_bytes) +
         " bytes to rank " + std::to_string(receiver) + ", which receives " +
         std::to_string(recv_bytes) + " bytes";
}

}  // namespace dcp::comm::detail
