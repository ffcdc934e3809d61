// SPDX-License-Identifier: Apache-2.0
// Plans batches in the background: requests go in, built plans come out in the order asked for.
// The training data loader plans the next batches while the current one trains (docs/python.md).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dcp/plan_request.h"
#include "dcp/planner/model_plan_builder.h"

namespace dcp {

// Plans requests (plan_request) on its own threads.
class PlanQueue {
 public:
  using Ticket = std::uint64_t;

  // `threads` planner threads (at least 1), started at once.
  explicit PlanQueue(std::int32_t threads);
  // Drops the requests not started and joins the threads (after the running plans finish).
  ~PlanQueue();
  PlanQueue(const PlanQueue&) = delete;
  PlanQueue& operator=(const PlanQueue&) = delete;

  // Queues a request; requests start in the order submitted.
  Ticket submit(PlanRequest request);
  // Blocks until the request's plan is built and hands it over (once per ticket), or rethrows the
  // exception planning it threw. Throws Error for an unknown or already taken ticket, or one
  // dropped by close().
  std::shared_ptr<const BuiltModelPlan> take(Ticket ticket);
  // Drops the requests not started, waits for the running ones and stops the threads. submit()
  // after close() throws Error. Idempotent.
  void close();
  // Planner threads still running (0 after close()).
  std::int32_t running_threads() const;

 private:
  struct Result {
    std::shared_ptr<const BuiltModelPlan> plan;
    std::exception_ptr error;
    bool done = false;
  };
  void work();

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable result_ready_;
  std::deque<std::pair<Ticket, PlanRequest>> pending_;
  std::map<Ticket, Result> results_;  // submitted and not yet taken
  Ticket next_ = 0;
  bool closed_ = false;
  std::int32_t running_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace dcp
