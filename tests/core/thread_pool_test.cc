// SPDX-License-Identifier: Apache-2.0
// The thread pool runs every index once, on the advertised workers, and survives errors.
#include "dcp/core/thread_pool.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "dcp/core/error.h"

namespace dcp {
namespace {

TEST(ThreadPool, RunsEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (std::size_t n : {0u, 1u, 2u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](std::size_t i, int) { hits[i].fetch_add(1); });
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << threads << " " << n;
    }
  }
}

TEST(ThreadPool, WorkerIndicesStayBelowTheThreadCount) {
  ThreadPool pool(3);
  std::atomic<int> bad = 0;
  pool.parallel_for(500, [&](std::size_t, int worker) {
    if (worker < 0 || worker >= 3) bad.fetch_add(1);
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPool, ManyConsecutiveCallsAllComplete) {
  ThreadPool pool(2);
  std::atomic<long> sum = 0;
  for (int call = 0; call < 200; ++call) {
    pool.parallel_for(10, [&](std::size_t i, int) { sum.fetch_add(static_cast<long>(i)); });
  }
  EXPECT_EQ(sum.load(), 200 * 45);
}

TEST(ThreadPool, RethrowsTheTasksExceptionAndStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(50,
                                 [](std::size_t i, int) {
                                   if (i == 17) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  std::atomic<int> count = 0;
  pool.parallel_for(20, [&](std::size_t, int) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), 20);
}

TEST(ThreadPool, NestedParallelForRunsInlineWithoutDeadlock) {
  ThreadPool pool(2);
  std::atomic<int> count = 0;
  pool.parallel_for(4, [&](std::size_t, int outer) {
    pool.parallel_for(5, [&](std::size_t, int inner) {
      EXPECT_EQ(inner, outer);
      count.fetch_add(1);
    });
  });
  EXPECT_EQ(count.load(), 20);
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(ThreadPool(0), InvalidInput); }

}  // namespace
}  // namespace dcp
