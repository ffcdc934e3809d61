// SPDX-License-Identifier: Apache-2.0
// Plans batches in the background.
#include "dcp/plan_queue.h"

#include <string>
#include <utility>

#include "dcp/core/error.h"

namespace dcp {

PlanQueue::PlanQueue(std::int32_t threads) {
  if (threads < 1) {
    throw InvalidInput("a plan queue needs at least 1 planner thread, not " +
                       std::to_string(threads));
  }
  running_ = threads;
  for (std::int32_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { work(); });
  }
}

PlanQueue::~PlanQueue() { close(); }

PlanQueue::Ticket PlanQueue::submit(PlanRequest request) {
  std::lock_guard lock(mutex_);
  if (closed_) {
    throw Error("the plan queue is closed");
  }
  const Ticket ticket = next_++;
  results_.emplace(ticket, Result{});
  pending_.emplace_back(ticket, std::move(request));
  work_ready_.notify_one();
  return ticket;
}

std::shared_ptr<const BuiltModelPlan> PlanQueue::take(Ticket ticket) {
  std::unique_lock lock(mutex_);
  auto it = results_.find(ticket);
  if (it == results_.end()) {
    throw Error("plan ticket " + std::to_string(ticket) + " is unknown or already taken");
  }
  result_ready_.wait(lock, [&] { return it->second.done; });
  Result result = std::move(it->second);
  results_.erase(it);
  if (result.error) {
    std::rethrow_exception(result.error);
  }
  return result.plan;
}

void PlanQueue::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    for (const auto& [ticket, request] : pending_) {
      Result& result = results_[ticket];
      result.error = std::make_exception_ptr(
          Error("plan ticket " + std::to_string(ticket) + " was dropped: the queue closed"));
      result.done = true;
    }
    pending_.clear();
  }
  work_ready_.notify_all();
  result_ready_.notify_all();
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

std::int32_t PlanQueue::running_threads() const {
  std::lock_guard lock(mutex_);
  return running_;
}

void PlanQueue::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return closed_ || !pending_.empty(); });
    if (pending_.empty()) {
      break;  // closed
    }
    auto [ticket, request] = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    Result result;
    try {
      result.plan = std::make_shared<const BuiltModelPlan>(plan_request(request));
    } catch (...) {
      result.error = std::current_exception();
    }
    result.done = true;
    lock.lock();
    results_[ticket] = std::move(result);
    result_ready_.notify_all();
  }
  --running_;
}

}  // namespace dcp
