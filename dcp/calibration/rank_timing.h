// SPDX-License-Identifier: Apache-2.0
// Timing operations on several ranks at once: a barrier before each, the same number of calls on
// every rank, per-call seconds per repeat.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "dcp/comm/communicator.h"

namespace dcp::calibration {

// What timing on several ranks at once needs from them.
class RankSync {
 public:
  virtual ~RankSync() = default;
  // Every rank enters before any leaves.
  virtual void barrier() = 0;
  // The largest `value` any rank passed (every rank calls it).
  virtual double max_over_ranks(double value) = 0;
};

// A RankSync over the ranks of a communicator: barrier() is the communicator's; the maximum
// travels as 8-byte messages through rank 0.
class CommunicatorSync final : public RankSync {
 public:
  explicit CommunicatorSync(comm::Communicator& communicator) : communicator_(communicator) {}
  void barrier() override { communicator_.barrier(); }
  double max_over_ranks(double value) override;

 private:
  comm::Communicator& communicator_;
};

using TimedOperation = std::function<void()>;

// Seconds per call of each operation on this rank, [operation][repeat]. Every rank of `sync`
// calls this with its own operations, the same count on every rank (an empty function where a
// rank takes no part). Each operation is called once to warm up (page faults, scratch buffers,
// BLAS's first call); then loops of 1, 2, 4, ... calls find how many calls last min_seconds on
// the slowest rank (at most 10000; the same count on every rank). Each repeat times every
// operation in turn: a barrier, one untimed call that lines the ranks up, then the loop; so that
// ratios of two operations of one repeat cancel slow drifts (other processes, clocks).
std::vector<std::vector<double>> time_operations(RankSync& sync,
                                                 std::span<const TimedOperation> operations,
                                                 std::int32_t repeats, double min_seconds);

// The median of repeated timings (the mean of the middle two of an even count); values not empty.
double median(std::vector<double> values);

}  // namespace dcp::calibration
