// SPDX-License-Identifier: Apache-2.0
// The bench suites' jobs: run in parallel, one progress line each as it finishes.
#include <cstdio>
#include <mutex>

#include "dcp/core/thread_pool.h"
#include "dcp/core/timing.h"

#include "apps/cli/bench_suites.h"

namespace dcp::cli {

void run_jobs(std::size_t count, int threads, std::ostream& progress,
              const std::function<std::string(std::size_t)>& job) {
  std::mutex progress_mutex;
  std::size_t done = 0;
  const auto start = Clock::now();
  ThreadPool pool(threads);
  pool.parallel_for(count, [&](std::size_t j, int) {
    const std::string line = job(j);
    const std::lock_guard<std::mutex> lock(progress_mutex);
    char head[64];
    std::snprintf(head, sizeof head, "[%zu/%zu %.0f s] ", ++done, count, ms_since(start) / 1e3);
    progress << head << line << "\n" << std::flush;
  });
}

}  // namespace dcp::cli
