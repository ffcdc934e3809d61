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

#include "dcp/model/attention_kind.h"
#include "dcp/model/attention_shape.h"

#include "dcp/planner/model_plan_builder.h"
#include "dcp/selection/plan_search.h"

namespace dcp {

// Everything that decides a plan: the batch and its attention kinds (each kind's masks, one per
// sequence, and layers), the attention shape, the block model options and the planner options.
// A plan of one mask is one kind of the default name and one layer. The same request gives the
// same plan bytes.
struct PlanRequest {
  AttentionShape shape;
  std::vector<TokenCount> lengths;   // the batch's sequences
  std::vector<AttentionKind> kinds;  // validate_kinds's checks apply
  TokenCount block_size = 0;  // 0: chosen by the block-size heuristic for the cluster's devices
  std::int32_t head_block_size = 1;
  PlanOptions plan;
};

// With an automatic block size, dcp's own strategies plan at each size of kBlockSizeSweep and keep
// the fastest under the simulator (unless `plan` names its block sizes already). The one home of
// this rule, for the command line and the plan queue alike.
void sweep_block_sizes_when_automatic(PlanOptions& plan, bool automatic_block_size);

// The block model of the request, then its plan (make_kind_workloads, then build_model_plan: for
// one kind, build_plan's plan). Throws InvalidInput for an invalid shape, kind, mask, block size
// or cluster.
BuiltModelPlan plan_request(const PlanRequest& request);

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
