// SPDX-License-Identifier: Apache-2.0
// Timing operations on several ranks at once.
#include "dcp/calibration/rank_timing.h"

#include <algorithm>
#include <cmath>

#include "dcp/core/ids.h"
#include "dcp/core/timing.h"

namespace dcp::calibration {
namespace {

constexpr std::int64_t kMaxIterations = 10000;

}  // namespace

double CommunicatorSync::max_over_ranks(double value) {
  comm::Communicator& c = communicator_;
  const std::int32_t size = c.size();
  if (size == 1) return value;
  if (c.rank() != 0) {
    double result = 0;
    const comm::TransferOp send[] = {{comm::TransferOp::Kind::kSend, 0, &value, sizeof value}};
    c.wait(c.start(send));
    const comm::TransferOp recv[] = {{comm::TransferOp::Kind::kRecv, 0, &result, sizeof result}};
    c.wait(c.start(recv));
    return result;
  }
  std::vector<double> values(to_size(size), value);
  std::vector<comm::TransferOp> ops;
  for (std::int32_t r = 1; r < size; ++r) {
    ops.push_back({comm::TransferOp::Kind::kRecv, r, &values[to_size(r)], sizeof(double)});
  }
  c.wait(c.start(ops));
  double result = *std::max_element(values.begin(), values.end());
  ops.clear();
  for (std::int32_t r = 1; r < size; ++r) {
    ops.push_back({comm::TransferOp::Kind::kSend, r, &result, sizeof result});
  }
  c.wait(c.start(ops));
  return result;
}

std::vector<std::vector<double>> time_operations(RankSync& sync,
                                                 std::span<const TimedOperation> operations,
                                                 std::int32_t repeats, double min_seconds) {
  const std::size_t ops = operations.size();
  const auto call = [&](std::size_t op) {
    if (operations[op]) operations[op]();
  };
  // `calls` calls of an operation on every rank at once, after a barrier and one untimed call
  // (which lines the ranks up: operations between ranks start when all of them have): seconds.
  const auto loop = [&](std::size_t op, std::int64_t calls) {
    sync.barrier();
    call(op);
    const Clock::time_point start = Clock::now();
    for (std::int64_t i = 0; i < calls; ++i) call(op);
    return ms_since(start) * 1e-3;
  };
  // Calls per repeat: doubled until the slowest rank's loop lasts an eighth of min_seconds, then
  // scaled to min_seconds (the same count on every rank).
  std::vector<std::int64_t> iterations;
  for (std::size_t op = 0; op < ops; ++op) {
    call(op);  // warm-up
    std::int64_t calls = 1;
    double slowest = sync.max_over_ranks(loop(op, calls));
    while (slowest < min_seconds / 8 && calls < kMaxIterations) {
      calls *= 2;
      slowest = sync.max_over_ranks(loop(op, calls));
    }
    iterations.push_back(static_cast<std::int64_t>(
        std::clamp(std::ceil(static_cast<double>(calls) * min_seconds / std::max(slowest, 1e-9)),
                   1.0, static_cast<double>(kMaxIterations))));
  }
  std::vector<std::vector<double>> seconds(ops);
  for (std::int32_t repeat = 0; repeat < repeats; ++repeat) {
    for (std::size_t op = 0; op < ops; ++op) {
      seconds[op].push_back(loop(op, iterations[op]) / static_cast<double>(iterations[op]));
    }
  }
  return seconds;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace dcp::calibration
