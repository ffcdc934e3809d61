// SPDX-License-Identifier: Apache-2.0
// The thread pool: workers sleep on a condition variable between parallel_for calls.
#include "dcp/core/thread_pool.h"

#include <string>

#include "dcp/core/error.h"

namespace dcp {
namespace {

// The pool whose task the current thread is running, to run nested parallel_for calls inline.
thread_local const ThreadPool* tls_running_pool = nullptr;
thread_local int tls_worker = 0;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1)
    throw InvalidInput("thread count must be at least 1, got " + std::to_string(threads));
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(int worker) {
  const ThreadPool* const outer_pool = tls_running_pool;
  const int outer_worker = tls_worker;
  tls_running_pool = this;
  tls_worker = worker;
  std::unique_lock lock(mutex_);
  while (next_ < size_) {
    const std::size_t index = next_++;
    const Task* task = task_;
    lock.unlock();
    try {
      (*task)(index, worker);
      lock.lock();
    } catch (...) {
      lock.lock();
      if (!error_) error_ = std::current_exception();
      next_ = size_;  // skip what has not started
    }
  }
  tls_running_pool = outer_pool;
  tls_worker = outer_worker;
}

void ThreadPool::worker_loop(int worker) {
  std::size_t seen = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    drain(worker);
    lock.lock();
    if (--busy_ == 0) done_.notify_one();
  }
}

void ThreadPool::parallel_for(std::size_t n, const Task& fn) {
  if (n == 0) return;
  // Inline: nested calls (the workers are busy with the outer call), one index, or no workers.
  if (tls_running_pool == this || n == 1 || workers_.empty()) {
    const int worker = tls_running_pool == this ? tls_worker : 0;
    for (std::size_t i = 0; i < n; ++i) fn(i, worker);
    return;
  }
  std::lock_guard call_lock(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    task_ = &fn;
    size_ = n;
    next_ = 0;
    error_ = nullptr;
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  drain(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    // Every worker must leave the generation before task_ (a reference to fn) goes out of scope.
    done_.wait(lock, [&] { return busy_ == 0; });
    task_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dcp
