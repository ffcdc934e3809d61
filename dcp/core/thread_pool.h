// SPDX-License-Identifier: Apache-2.0
// A small persistent thread pool whose parallel_for lets the calling thread take part.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dcp {

// `threads` threads in all: the caller of parallel_for plus threads - 1 workers started once in
// the constructor (no global instance: each owner sizes its own pool). Indices are handed out
// dynamically, so which worker runs which index is not fixed; callers that need reproducible
// floating-point sums must make their buffers depend on the index, never on the worker.
class ThreadPool {
 public:
  // The worker function: (index in [0, n), worker in [0, threads())). The caller is worker 0.
  using Task = std::function<void(std::size_t index, int worker)>;

  explicit ThreadPool(int threads);  // threads >= 1, else InvalidInput
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i, worker) once for every i in [0, n) and returns when all have finished. The first
  // exception a call throws is rethrown here after the others finish (indices not yet started
  // are skipped). A parallel_for issued from inside fn runs inline on the calling worker, and
  // calls from several outside threads are serialised, so neither deadlocks.
  void parallel_for(std::size_t n, const Task& fn);

 private:
  void worker_loop(int worker);
  // Takes indices until none is left; shared by the caller and the workers.
  void drain(int worker);

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;       // guards everything below
  std::condition_variable wake_;
  std::condition_variable done_;
  const Task* task_ = nullptr;
  std::size_t size_ = 0;
  std::size_t next_ = 0;
  std::size_t generation_ = 0;
  int busy_ = 0;  // workers still inside the current generation
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace dcp
